// Open-addressing hash tables for the two hot lookups of BPE: token text -> id (vocabularies of
// up to ~260k entries) and (left id, right id) -> merge. std::unordered_map allocates a node per
// entry and misses the cache on every probe; these keep entries in one array with linear
// probing, which makes loading a 128k-vocabulary file and the merge loop markedly faster.
// Insert-only (tokenizers never erase), not thread-safe for writes, safe for concurrent reads.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace ctune::tok {

// 64-bit hash of a byte string: 8 bytes at a time, multiply-xorshift mixing.
inline std::uint64_t hash_bytes(std::string_view s) {
  constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ull;
  std::uint64_t h = s.size() * kMul;
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  std::uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * kMul;
  h ^= h >> 32;
  return h;
}

inline std::uint64_t hash_u64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

// Key -> V over one array with linear probing. `Traits` supplies the key type, its hash and an
// "empty slot" key that real keys never equal. Slots hold just key and value, so they are small
// and a probe sequence stays within a cache line or two.
template <typename Traits, typename V>
class FlatMap {
 public:
  using Key = typename Traits::Key;

  void reserve(std::size_t n) { grow(capacity_for(n)); }

  // Inserts or overwrites.
  void insert(const Key& key, const V& value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow(capacity_for(size_ + 1));
    std::size_t i = Traits::hash(key) & mask_;
    for (; !Traits::is_empty(slots_[i].key); i = (i + 1) & mask_) {
      if (slots_[i].key == key) {
        slots_[i].value = value;
        return;
      }
    }
    slots_[i] = Slot{key, value};
    ++size_;
  }

  // Pointer to the value, or nullptr.
  const V* find(const Key& key) const {
    if (size_ == 0) return nullptr;
    for (std::size_t i = Traits::hash(key) & mask_; !Traits::is_empty(slots_[i].key); i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
    }
    return nullptr;
  }

  // Starts loading the slot `key` hashes to, so that a later find() does not wait on memory.
  void prefetch(const Key& key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Traits::hash(key) & mask_]);
  }

  std::size_t size() const { return size_; }

 private:
  struct Slot {
    Key key = Traits::empty();
    V value{};
  };
  // Load factor at most 3/4.
  static std::size_t capacity_for(std::size_t n) {
    std::size_t c = 16;
    while (c * 3 < n * 4 + 4) c *= 2;
    return c;
  }
  void grow(std::size_t capacity) {
    if (capacity <= slots_.size()) return;
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (Traits::is_empty(s.key)) continue;
      std::size_t i = Traits::hash(s.key) & mask_;
      while (!Traits::is_empty(slots_[i].key)) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

// A string key that carries its first 16 bytes inline: most tokens are that short, so a probe
// compares bytes already in the slot instead of chasing the pointer. The bytes themselves must
// outlive the map.
struct InlineKey {
  const char* data = nullptr;
  std::uint32_t size = 0;
  char head[16] = {};
  InlineKey() = default;
  InlineKey(std::string_view s)  // NOLINT: implicit on purpose, lookups pass string_views
      : data(s.data() ? s.data() : ""), size(static_cast<std::uint32_t>(s.size())) {
    if (!s.empty()) std::memcpy(head, s.data(), s.size() < 16 ? s.size() : 16);
  }
  bool operator==(const InlineKey& o) const {
    if (size != o.size || std::memcmp(head, o.head, 16) != 0) return false;
    return size <= 16 || std::memcmp(data + 16, o.data + 16, size - 16) == 0;
  }
};

struct StringKeyTraits {
  using Key = InlineKey;
  static std::uint64_t hash(const InlineKey& k) { return hash_bytes(std::string_view(k.data, k.size)); }
  static InlineKey empty() { return InlineKey(); }
  static bool is_empty(const InlineKey& k) { return k.data == nullptr; }
};

// Ids are below 2^31, so a packed pair of ids never has all bits set.
struct U64KeyTraits {
  using Key = std::uint64_t;
  static std::uint64_t hash(std::uint64_t k) { return hash_u64(k); }
  static std::uint64_t empty() { return ~std::uint64_t{0}; }
  static bool is_empty(std::uint64_t k) { return k == ~std::uint64_t{0}; }
};

using FlatStringMap = FlatMap<StringKeyTraits, std::int32_t>;
template <typename V>
using FlatU64Map = FlatMap<U64KeyTraits, V>;

}  // namespace ctune::tok
