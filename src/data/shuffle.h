// Deterministic permutations for the epoch order and the eval split. Everything here is fixed
// by the C++ standard or by this file: std::mt19937_64's output sequence is specified exactly,
// while std::shuffle and std::uniform_int_distribution are implementation-defined, so they are
// not used. The same (seed, stream, index) gives the same order on every machine, compiler and
// standard library.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ctune::data {

// Independent random streams derived from one seed.
enum class Stream : std::uint64_t { epoch_order = 1, eval_split = 2 };

// The 64-bit seed of stream `stream`, item `index` (e.g. the epoch), mixed with SplitMix64 so
// that nearby seeds and epochs give unrelated generators.
std::uint64_t derive_seed(std::uint64_t seed, Stream stream, std::uint64_t index);

// Uniform integer in [0, n), n >= 1, without modulo bias (rejection of the low remainder).
std::uint64_t uniform_below(std::mt19937_64& gen, std::uint64_t n);

// Fisher-Yates: for i = n-1 down to 1, swap v[i] with v[uniform_below(i + 1)].
void fisher_yates(std::vector<std::int64_t>& v, std::mt19937_64& gen);

// 0..n-1 in the order of (seed, stream, index).
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed, Stream stream, std::uint64_t index);

}  // namespace ctune::data
