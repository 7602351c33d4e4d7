// The tokenizer in GGUF form (docs/formats.md#gguf-tokenizer-keys): tokenizer.ggml.* keys built from the
// model directory's tokenizer, the one ctune itself loads (tokenizer.json preferred, else
// tokenizer.model).
//   byte-level BPE tokenizer.json   -> model "gpt2": tokens, token_type, merges, pre
//   SentencePiece-style tokenizer.json (Llama-2: "▁" and <0xNN> byte fallback)
//                                   -> model "llama": tokens, scores (-rank of the merge that
//                                      makes the token, 0 otherwise), token_type
//   tokenizer.model (SentencePiece BPE) -> model "llama": its pieces, scores and types
// Special ids and add_bos/add_eos come from ctune's tokenizer (so tokenizer_config.json and
// special_tokens_map.json apply), falling back to config.json's bos/eos. Ids the tokenizer does
// not use, up to the model's vocab_size, become "[PAD<id>]" tokens of type unused, since
// llama.cpp sizes the embedding by the token list.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "model/config.h"

namespace ctune::exporter {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum TokenType : std::int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct GgufVocab {
  std::string model;  // "llama" | "gpt2"
  std::string pre;    // gpt2 only: the llama.cpp pre-tokenizer name
  std::vector<std::string> tokens;
  std::vector<float> scores;  // llama only
  std::vector<std::int32_t> types;
  std::vector<std::string> merges;  // gpt2 only: "left right"
  std::optional<std::int32_t> bos, eos, unk, pad;
  bool add_bos = false, add_eos = false;
  std::optional<bool> add_space_prefix;          // llama only
  std::optional<bool> remove_extra_whitespaces;  // llama only
  std::optional<std::string> chat_template;
  std::string source;  // the file it came from, for messages
};

// Reads the tokenizer of `model_dir` for a model of config.vocab_size embeddings. IoError when
// the directory has no tokenizer; UnsupportedError for a tokenizer llama.cpp cannot reproduce
// (unknown pre-tokenizer, SentencePiece unigram); ConfigError when the tokenizer has more ids than
// the model or two ids share a token string (llama.cpp requires unique strings).
GgufVocab read_gguf_vocab(const std::filesystem::path& model_dir, const model::ModelConfig& config);

// general.name as llama.cpp can load it with `vocab`: llama.cpp's vocabulary loader treats a
// model whose name contains "phi3" or "phi-3" as Phi-3 and looks up </s>, <unk>, <s> and
// <|endoftext|>, failing to load when one is missing; such a name is written with "phi_3".
std::string llama_cpp_loadable_name(const std::string& name, const GgufVocab& vocab);

void write_vocab_metadata(io::GgufWriter& writer, const GgufVocab& vocab);

}  // namespace ctune::exporter
