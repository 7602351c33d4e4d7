// One interface for every tokenizer ctune reads: SentencePiece `tokenizer.model` and Hugging Face
// `tokenizer.json` (byte-level BPE and SentencePiece-style BPE). Special tokens and the
// add-BOS/EOS flags come from tokenizer_config.json / special_tokens_map.json when present.
// Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ctune::tok {

struct SpecialTokens {
  std::optional<std::int32_t> bos;
  std::optional<std::int32_t> eos;
  std::optional<std::int32_t> pad;
  std::optional<std::int32_t> unk;
  bool add_bos = false;  // prepend bos when encoding with add_special
  bool add_eos = false;  // append eos when encoding with add_special
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text -> ids. Special-token strings inside `text` (e.g. "<|eot_id|>") map to their ids, as
  // Hugging Face does; with `special_as_text` they are tokenized as the text they are, so that
  // text from a dataset cannot forge control tokens (tiktoken's default). Non-special added
  // tokens match either way. With add_special, bos/eos are added as the tokenizer's flags say.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special = true, bool special_as_text = false) const;

  // Ids -> text. With skip_special, special tokens (bos, eos, pad, added special tokens) are
  // dropped. Throws FormatError for an id outside the vocabulary.
  virtual std::string decode(const std::vector<std::int32_t>& ids, bool skip_special = false) const = 0;

  // Number of ids, added tokens included (max id + 1).
  virtual std::size_t vocab_size() const = 0;
  virtual std::optional<std::int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(std::int32_t id) const = 0;

  // The strings of the special tokens (added tokens marked special, SentencePiece control
  // pieces), e.g. "<|im_end|>": what chat-template masks look for at the end of a turn.
  virtual std::vector<std::string> special_tokens() const = 0;

  // "sentencepiece", "bpe-byte-level" or "bpe-sentencepiece".
  virtual std::string kind() const = 0;
  // True when decode(encode(x, false)) == x for every valid UTF-8 x (after normalisation).
  virtual bool lossless() const = 0;

  const SpecialTokens& special() const { return special_; }

 protected:
  // Encoding without bos/eos.
  virtual std::vector<std::int32_t> encode_ordinary(std::string_view text, bool special_as_text) const = 0;
  SpecialTokens special_;
};



// Generated ids as text, special tokens skipped: ids past the tokenizer's vocabulary (embedding
// rows padded beyond it, which a model may sample) decode to nothing, as in Hugging Face's
// tokenizers.
std::string decode_generated(const Tokenizer& tokenizer, const std::vector<std::int64_t>& ids);

// Writes a byte-level BPE tokenizer.json with no merges (256 byte tokens + <s>, </s>) and its
// tokenizer_config.json into `dir`: a lossless tokenizer for random-initialised models.
void write_byte_tokenizer(const std::filesystem::path& dir);

}  // namespace ctune::tok
