// BPE model: loading and the merge loop. The loop follows the Rust crate's Word::merge_all:
// symbols form a doubly linked list over a vector; a min-heap holds candidate merges ordered
// by (rank, position); a popped candidate is applied only if the pair at its position still
// maps to the same merged token, otherwise it is stale and dropped.
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "core/error.h"
#include "tokenizer/component_json.h"
#include "tokenizer/unicode.h"

namespace ctune::tok {
namespace {
// Ids above this are rejected rather than allocating a table for them (the largest real
// vocabularies are ~260k).
constexpr std::int64_t kMaxId = 1 << 22;
constexpr std::size_t kMaxCachedWordBytes = 256;
constexpr std::size_t kCacheCapacity = 100000;
}  // namespace

BpeModel::BpeModel(const Json& config, const std::string& where, BpeTables tables) {
  if (auto d = json_number(config, "dropout", where); d && *d > 0.0) {
    throw UnsupportedError(where + ".dropout " + std::to_string(*d) +
                           " is not supported (BPE dropout is a training-time sampling)");
  }
  unk_token_ = json_string(config, "unk_token", where);
  continuing_subword_prefix_ = optional_string(config, "continuing_subword_prefix", where, "");
  end_of_word_suffix_ = optional_string(config, "end_of_word_suffix", where, "");
  fuse_unk_ = optional_bool(config, "fuse_unk", where, false);
  byte_fallback_ = optional_bool(config, "byte_fallback", where, false);
  ignore_merges_ = optional_bool(config, "ignore_merges", where, false);

  // The tables carry the contents; the object still tells their shape.
  const Json& vocab = require_field(config, "vocab", where);
  if (!vocab.is_object())
    throw FormatError(where + ".vocab: expected an object, found " + json_type_name(vocab));
  if (auto m = config.find("merges"); m != config.end() && !m->is_null() && !m->is_array()) {
    throw FormatError(where + ".merges: expected an array, found " + json_type_name(*m));
  }
  arena_ = std::move(tables.arena);
  read_vocab(tables.vocab, where + ".vocab");
  read_merges(tables.merges, where + ".merges");

  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[b] = token_to_id(name).value_or(-1);
  }
  if (unk_token_) {
    if (auto id = token_to_id(*unk_token_)) unk_id_ = *id;
  }
}

void BpeModel::read_vocab(const std::vector<BpeTables::Token>& vocab, const std::string& where) {
  std::int64_t max_id = -1;
  for (const auto& t : vocab) {
    if (t.id < 0 || t.id >= kMaxId) {
      throw FormatError(where + ": token \"" + std::string(text(t.offset, t.size)) + "\" has id " +
                        std::to_string(t.id) + " (expected 0 <= id < " + std::to_string(kMaxId) + ")");
    }
    max_id = std::max(max_id, t.id);
  }
  id_to_token_.resize(static_cast<std::size_t>(max_id + 1));
  has_id_.assign(id_to_token_.size(), false);
  token_to_id_.reserve(vocab.size());
  for (const auto& t : vocab) {
    const auto id = static_cast<std::size_t>(t.id);
    const std::string_view token = text(t.offset, t.size);
    if (has_id_[id] && id_to_token_[id] != token) {
      throw FormatError(where + ": token \"" + std::string(token) + "\" reuses the id " + std::to_string(id) +
                        " of \"" + std::string(id_to_token_[id]) + "\"");
    }
    id_to_token_[id] = token;
    has_id_[id] = true;
    token_to_id_.insert(token, static_cast<std::int32_t>(id));
  }
}

void BpeModel::read_merges(const std::vector<BpeTables::MergePair>& merges, const std::string& where) {
  // The merged token of each pair ("a" + "b", minus the continuing-subword prefix of "b").
  std::string merged;
  std::vector<std::uint32_t> merged_offset(merges.size() + 1);
  const std::string& prefix = continuing_subword_prefix_;
  for (std::size_t r = 0; r < merges.size(); ++r) {
    std::string_view right = text(merges[r].right_offset, merges[r].right_size);
    if (!prefix.empty() && right.substr(0, prefix.size()) == prefix) right.remove_prefix(prefix.size());
    merged_offset[r] = static_cast<std::uint32_t>(merged.size());
    merged.append(text(merges[r].left_offset, merges[r].left_size)).append(right);
  }
  merged_offset[merges.size()] = static_cast<std::uint32_t>(merged.size());
  auto merged_token = [&](std::size_t r) {
    return std::string_view(merged).substr(merged_offset[r], merged_offset[r + 1] - merged_offset[r]);
  };
  auto lookup = [&](std::string_view token, std::size_t rank) {
    const std::int32_t* id = token_to_id_.find(token);
    if (!id) {
      throw FormatError(where + "[" + std::to_string(rank) + "]: token \"" + std::string(token) +
                        "\" is not in the vocabulary");
    }
    return *id;
  };
  // Resolving three tokens per merge hits random places of multi-megabyte tables, which is most
  // of the load time of a 128k vocabulary. A three-stage pipeline keeps several misses in
  // flight: prefetch the vocabulary slots of merge r + 2k, resolve merge r + k and prefetch its
  // merge-table slot, insert merge r.
  constexpr std::size_t kAhead = 8;
  const std::size_t n = merges.size();
  std::vector<std::uint64_t> keys(n);
  std::vector<std::int32_t> merged_ids(n);
  merges_.reserve(n);
  for (std::size_t r = 0; r < n + 2 * kAhead; ++r) {
    if (r < n) {
      token_to_id_.prefetch(text(merges[r].left_offset, merges[r].left_size));
      token_to_id_.prefetch(text(merges[r].right_offset, merges[r].right_size));
      token_to_id_.prefetch(merged_token(r));
    }
    if (r >= kAhead && r - kAhead < n) {
      const std::size_t k = r - kAhead;
      keys[k] = pair_key(lookup(text(merges[k].left_offset, merges[k].left_size), k),
                         lookup(text(merges[k].right_offset, merges[k].right_size), k));
      merged_ids[k] = lookup(merged_token(k), k);
      merges_.prefetch(keys[k]);
    }
    if (r >= 2 * kAhead && r - 2 * kAhead < n) {
      const std::size_t rank = r - 2 * kAhead;
      merges_.insert(keys[rank], Merge{static_cast<std::int32_t>(rank), merged_ids[rank]});
    }
  }
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  const std::int32_t* id = token_to_id_.find(token);
  if (!id) return std::nullopt;
  return *id;
}

const std::string_view* BpeModel::id_to_token(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size() ||
      !has_id_[static_cast<std::size_t>(id)]) {
    return nullptr;
  }
  return &id_to_token_[static_cast<std::size_t>(id)];
}

void BpeModel::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    tokenize(word, out);
    return;
  }
  const std::size_t h = std::hash<std::string_view>{}(word);
  {
    std::shared_lock lock(cache_mutex_);
    auto it = cache_.find(h);
    if (it != cache_.end() && it->second.word == word) {
      out.insert(out.end(), it->second.ids.begin(), it->second.ids.end());
      return;
    }
  }
  const std::size_t first = out.size();
  tokenize(word, out);
  std::unique_lock lock(cache_mutex_);
  if (cache_.size() < kCacheCapacity) {
    // On a hash collision the first word keeps the slot; the other is simply not cached.
    cache_.try_emplace(
        h, CacheEntry{std::string(word), std::vector<std::int32_t>(
                                             out.begin() + static_cast<std::ptrdiff_t>(first), out.end())});
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::int32_t id;
    std::int32_t prev;
    std::int32_t next;
    bool alive;
  };
  struct Candidate {
    std::int32_t rank;
    std::int32_t pos;
    std::int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();

  auto add = [&](std::int32_t id) {
    auto n = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };
  // Characters become symbols; unknown ones fall back to byte tokens or (fused) unk.
  bool pending_unk = false;
  std::string piece;
  std::size_t i = 0;
  while (i < word.size()) {
    const std::size_t start = i;
    i += utf8_length(static_cast<unsigned char>(word[i]));
    if (i > word.size()) i = word.size();
    std::string_view ch = word.substr(start, i - start);
    std::optional<std::int32_t> id;
    if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
      id = token_to_id(ch);
    } else {
      piece.clear();
      if (start > 0) piece += continuing_subword_prefix_;
      piece.append(ch);
      if (i == word.size()) piece += end_of_word_suffix_;
      id = token_to_id(piece);
      ch = piece;
    }
    if (id) {
      if (pending_unk) add(unk_id_);
      pending_unk = false;
      add(*id);
      continue;
    }
    if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) {
          return byte_ids_[static_cast<unsigned char>(c)] >= 0;
        })) {
      if (pending_unk) add(unk_id_);
      pending_unk = false;
      for (char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (unk_id_ < 0) continue;  // no unk token: the character is dropped, as in the Rust crate
    if (pending_unk && !fuse_unk_) add(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) add(unk_id_);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto push_candidate = [&](std::int32_t pos) {
    const Symbol& s = symbols[static_cast<std::size_t>(pos)];
    if (s.next < 0) return;
    const Merge* m = merges_.find(pair_key(s.id, symbols[static_cast<std::size_t>(s.next)].id));
    if (!m) return;
    heap.push_back({m->rank, pos, m->new_id});
    std::push_heap(heap.begin(), heap.end(), std::greater<Candidate>());
  };
  for (std::size_t k = 0; k + 1 < symbols.size(); ++k) push_candidate(static_cast<std::int32_t>(k));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Candidate>());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    const Merge* m = merges_.find(pair_key(left.id, right.id));
    if (!m || m->new_id != top.new_id) continue;  // stale candidate
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) push_candidate(left.prev);
    push_candidate(top.pos);
  }
  for (std::int32_t k = 0; k >= 0; k = symbols[static_cast<std::size_t>(k)].next) {
    out.push_back(symbols[static_cast<std::size_t>(k)].id);
  }
}

}  // namespace ctune::tok
