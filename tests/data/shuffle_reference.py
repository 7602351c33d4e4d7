#!/usr/bin/env python3
"""Independent implementation of src/data/shuffle.cpp in plain Python: std::mt19937_64 as the C++
standard specifies it ([rand.eng.mers] with the mt19937_64 parameters), SplitMix64 seed
derivation, unbiased rejection sampling and Fisher-Yates. Prints the orders that
test_sampler.cpp hard-codes (Shuffle.FixedOrdersForAFixedSeed); run it after a deliberate change
of the algorithm and update the test. No dependencies: python3 shuffle_reference.py"""
MASK = (1 << 64) - 1


class MT19937_64:
    N, M = 312, 156

    def __init__(self, seed):
        self.mt = [seed & MASK]
        for i in range(1, self.N):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK)
        self.index = self.N

    def __call__(self):
        if self.index >= self.N:
            for k in range(self.N):
                x = (self.mt[k] & 0xFFFFFFFF80000000) | (self.mt[(k + 1) % self.N] & 0x7FFFFFFF)
                xa = (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
                self.mt[k] = self.mt[(k + self.M) % self.N] ^ xa
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


EPOCH_ORDER, EVAL_SPLIT = 1, 2


def derive_seed(seed, stream, index):
    return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index)


def uniform_below(gen, n):
    threshold = ((1 << 64) - n) % n
    while True:
        x = gen()
        if x >= threshold:
            return x % n


def permutation(n, seed, stream, index):
    v = list(range(n))
    gen = MT19937_64(derive_seed(seed, stream, index))
    for i in range(n, 1, -1):
        j = uniform_below(gen, i)
        v[i - 1], v[j] = v[j], v[i - 1]
    return v


if __name__ == "__main__":
    gen = MT19937_64(5489)  # default seed
    for _ in range(9999):
        gen()
    assert gen() == 9981545732273789042, "mt19937_64 does not match the standard"
    print("permutation(10, 1234, epoch_order, 0):", permutation(10, 1234, EPOCH_ORDER, 0))
    print("permutation(10, 1234, epoch_order, 1):", permutation(10, 1234, EPOCH_ORDER, 1))
    print("permutation(10, 1234, eval_split, 0): ", permutation(10, 1234, EVAL_SPLIT, 0))
    print("derive_seed(0, epoch_order, 0):       ", derive_seed(0, EPOCH_ORDER, 0))
    print("seed 42, 8 examples, epoch 0:         ", permutation(8, 42, EPOCH_ORDER, 0))
    print("seed 42, 8 examples, epoch 1:         ", permutation(8, 42, EPOCH_ORDER, 1))
