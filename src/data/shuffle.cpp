// Deterministic shuffling; see shuffle.h.
#include "data/shuffle.h"

#include <numeric>
#include <utility>

namespace ctune::data {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::uint64_t derive_seed(std::uint64_t seed, Stream stream, std::uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(stream)) ^ index);
}

std::uint64_t uniform_below(std::mt19937_64& gen, std::uint64_t n) {
  // 2^64 mod n: drawing below it would make the low residues more likely.
  const std::uint64_t threshold = (0 - n) % n;
  for (;;) {
    const std::uint64_t x = gen();
    if (x >= threshold) return x % n;
  }
}

void fisher_yates(std::vector<std::int64_t>& v, std::mt19937_64& gen) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(uniform_below(gen, i));
    std::swap(v[i - 1], v[j]);
  }
}

std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed, Stream stream, std::uint64_t index) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  std::mt19937_64 gen(derive_seed(seed, stream, index));
  fisher_yates(v, gen);
  return v;
}

}  // namespace ctune::data
