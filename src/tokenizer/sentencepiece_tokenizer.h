// A SentencePiece `tokenizer.model`, driven through libctune_spm.so (see spm_shim.h for why it
// is a dlopen()ed C library). Like Hugging Face's slow LlamaTokenizer, the text is first split on
// the model's control and unknown pieces ("<s>", "</s>", "<unk>"), which map to their ids; each
// remaining segment is encoded by SentencePiece itself (so it gets its own dummy-prefix "▁").
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/tokenizer.h"

struct ctune_spm;  // the C handle of spm_shim.h

namespace ctune::tok {

struct SpmLibrary;

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Loads `file` and applies tokenizer_config.json / special_tokens_map.json beside it.
  // IoError when libctune_spm.so cannot be found or the file cannot be read, FormatError when
  // SentencePiece rejects its content.
  explicit SentencePieceTokenizer(const std::filesystem::path& file);
  ~SentencePieceTokenizer() override;

  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special = false) const override;
  std::size_t vocab_size() const override { return static_cast<std::size_t>(vocab_size_); }
  std::optional<std::int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(std::int32_t id) const override;
  std::vector<std::string> special_tokens() const override;
  std::string kind() const override { return "sentencepiece"; }
  // Decided at load time by round-tripping a probe string with repeated, leading and trailing
  // spaces, tabs, newlines, decomposed and compatibility characters: true for models trained
  // with the identity normalizer, no whitespace folding and byte fallback (Llama-2's setup).
  bool lossless() const override { return lossless_; }

 protected:
  std::vector<std::int32_t> encode_ordinary(std::string_view text, bool special_as_text) const override;

 private:
  void encode_text(std::string_view text, std::vector<std::int32_t>& out) const;
  std::string decode_run(const std::vector<std::int32_t>& ids) const;
  std::string piece(std::int32_t id) const;

  const SpmLibrary* lib_ = nullptr;
  ::ctune_spm* handle_ = nullptr;
  std::string where_;
  std::int32_t vocab_size_ = 0;
  std::vector<unsigned char> special_piece_;  // per id: control or unknown piece
  std::vector<AddedToken> specials_;
  TokenMatcher matcher_;
  bool lossless_ = false;
};

}  // namespace ctune::tok
