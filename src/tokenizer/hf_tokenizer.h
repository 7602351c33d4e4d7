// A Hugging Face tokenizer.json with a BPE model: the full encode pipeline (added tokens on raw
// text -> normalizer per remaining segment -> added tokens on normalized text -> pre-tokenizer
// -> BPE per word) and decode (ids -> token strings -> decoder chain). Byte-level files
// (Llama-3, Qwen2/3, GPT-2) and SentencePiece-style files (Llama-2) both land here; kind()
// tells them apart.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/json.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tokenizer.h"

namespace ctune::tok {

class HfTokenizer : public Tokenizer {
 public:
  // Reads `file` (tokenizer.json) and the tokenizer_config.json / special_tokens_map.json
  // beside it.
  explicit HfTokenizer(const std::filesystem::path& file);
  // From an already parsed tokenizer.json; `where` names it in errors. Side files are not read.
  HfTokenizer(const Json& root, const std::string& where);

  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special = false) const override;
  std::size_t vocab_size() const override;
  std::optional<std::int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(std::int32_t id) const override;
  std::vector<std::string> special_tokens() const override;
  std::string kind() const override { return byte_level_ ? "bpe-byte-level" : "bpe-sentencepiece"; }
  // Byte-level files round-trip every string (after normalisation). SentencePiece-style files
  // do not: a literal U+2581 decodes to a space, and text right after an added token gains
  // the "▁" prefix the normalizer prepends to every segment.
  bool lossless() const override { return byte_level_; }

 protected:
  std::vector<std::int32_t> encode_ordinary(std::string_view text, bool special_as_text) const override;

 private:
  // Shared by both constructors; `tables` comes from the streaming reader, or is built from
  // `root` when absent.
  void init(const Json& root, const std::string& where, std::optional<BpeTables> tables);
  void read_added_tokens(const Json& list, const std::string& where);
  // Normalizes, pre-tokenizes and encodes one segment that holds no raw-matched added token.
  void encode_segment(std::string_view text, bool at_start, std::vector<std::int32_t>& out) const;
  std::optional<std::string_view> token_text(std::int32_t id) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, std::int32_t> added_by_content_;
  std::unordered_map<std::int32_t, std::size_t> added_by_id_;  // index into added_
  TokenMatcher raw_matcher_;
  TokenMatcher normalized_matcher_;
  bool byte_level_ = false;
};

}  // namespace ctune::tok
