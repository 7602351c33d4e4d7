// ExampleBuilder: Rendered text -> Example (ids, labels), then truncation to max_seq_len.
//
// Tokenization. The rendered pieces are cut at every special token (template markers, bos,
// eos), which are looked up by id; the text between two special tokens (a "chunk") is encoded
// whole, exactly as encoding the full rendered string would encode it, since tokenizers split
// on added tokens before anything else. A mask boundary inside a chunk is located by encoding
// the chunk's prefix up to the boundary: when those ids are a prefix of the chunk's ids the
// boundary falls between two tokens (the usual case, and always for the templates here given
// where the renderers put their boundaries). Otherwise a token straddles it; the straddling
// token is assigned to the later side and counted in BuildResult::straddles.
// Encoding each segment separately instead would not give the same ids: SentencePiece-style
// tokenizers (Llama-2) prepend "▁" to every separately encoded text, so " answer" alone becomes
// "▁▁answer"; the prefix check avoids that without knowing the tokenizer's normalizer.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "data/example.h"
#include "data/rendered.h"
#include "tokenizer/tokenizer.h"

namespace ctune::data {

struct BuildResult {
  Example example;
  bool truncated = false;  // longer than max_seq_len before truncation
  std::int64_t straddles = 0;
  std::int64_t full_length = 0;  // tokens before truncation
  // True when at least one label is not kIgnoreIndex (after truncation).
  bool has_target() const;
};

// Not thread-safe (it caches special-token ids); use one per thread.
class ExampleBuilder {
 public:
  // max_seq_len <= 0: no truncation. parse_special_in_content: DataOptions::parse_special_in_content.
  ExampleBuilder(const tok::Tokenizer& tokenizer, bool train_on_input, std::int64_t max_seq_len,
                 bool parse_special_in_content = false);

  // ConfigError when a special piece is not a token of the vocabulary.
  BuildResult build(const Rendered& rendered) const;

 private:
  std::int32_t special_id(const std::string& token) const;
  std::vector<std::int32_t> encode(std::string_view text, bool special_as_text) const;
  // Appends the ids and labels of one chunk of text pieces [begin, end).
  void encode_chunk(const std::vector<Piece>& pieces, std::size_t begin, std::size_t end, bool train_all,
                    bool special_as_text, Example& out, std::int64_t& straddles) const;

  const tok::Tokenizer& tok_;
  bool train_on_input_;
  std::int64_t max_seq_len_;
  bool special_as_text_;
  mutable std::unordered_map<std::string, std::int32_t> special_cache_;
};

}  // namespace ctune::data
