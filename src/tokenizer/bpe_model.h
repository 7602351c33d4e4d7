// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, merges by rank,
// and the per-word merge loop. Covers byte-level BPE (GPT-2, Llama-3, Qwen) and
// SentencePiece-style BPE (Llama-2: byte_fallback, unk_token, fuse_unk), plus ignore_merges,
// continuing_subword_prefix and end_of_word_suffix. Because SentencePiece-style files have no
// pre-tokenizer, a whole line can be one word: the merge loop is a priority queue over a linked
// list of symbols, O(n log n). Results for short words are cached; the cache is shared by all
// threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_tables.h"
#include "tokenizer/flat_map.h"

namespace ctune::tok {

class BpeModel {
 public:
  // Reads the options of the model object `config` and takes vocabulary and merges from
  // `tables` (see bpe_tables.h). `where` names the location for errors ("tokenizer.json:
  // model"). FormatError when a merge names a token that is not in the vocabulary, when ids are
  // negative or absurdly large, or on wrong types; UnsupportedError for dropout.
  BpeModel(const nlohmann::json& config, const std::string& where, BpeTables tables);

  // Appends the ids of one pre-tokenised word.
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // nullptr when no token has this id.
  const std::string_view* id_to_token(std::int32_t id) const;
  // Highest id + 1.
  std::size_t size() const { return id_to_token_.size(); }

  const std::optional<std::string>& unk_token() const { return unk_token_; }
  // The unk token may live among the added tokens rather than the model vocabulary; the owner
  // resolves it and tells the model.
  void set_unk_id(std::int32_t id) { unk_id_ = id; }
  bool unk_resolved() const { return !unk_token_ || unk_id_ >= 0; }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t new_id;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void read_vocab(const std::vector<BpeTables::Token>& vocab, const std::string& where);
  void read_merges(const std::vector<BpeTables::MergePair>& merges, const std::string& where);
  std::string_view text(std::uint32_t offset, std::uint32_t size) const {
    return std::string_view(arena_).substr(offset, size);
  }
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

  std::string arena_;                          // token bytes (see BpeTables)
  std::vector<std::string_view> id_to_token_;  // views into arena_
  std::vector<bool> has_id_;
  FlatStringMap token_to_id_;  // keys view into arena_
  FlatU64Map<Merge> merges_;

  std::optional<std::string> unk_token_;
  std::int32_t unk_id_ = -1;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::int32_t byte_ids_[256];  // id of "<0xAB>" per byte, -1 when absent

  // Word cache: hash of the word -> (word, ids). Filled until full, like the Rust crate's.
  struct CacheEntry {
    std::string word;
    std::vector<std::int32_t> ids;
  };
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::size_t, CacheEntry> cache_;
};

}  // namespace ctune::tok
