// Streaming reader of tokenizer.json: one pass over the file in which model.vocab and
// model.merges go straight into BpeTables and everything else (normalizer, pre_tokenizer,
// added_tokens, ...) becomes a small JSON DOM. Loading Llama-3's 9 MB file this way costs a
// fraction of building a full DOM and tearing it down again.
#pragma once

#include <filesystem>

#include "core/json.h"
#include "tokenizer/bpe_tables.h"

namespace ctune::tok {

struct TokenizerJson {
  Json root;  // the whole document, with model.vocab / model.merges left empty
  BpeTables tables;
  bool has_vocab = false;  // model.vocab was present
};

// IoError when the file cannot be read; FormatError for invalid JSON (with the position) or a
// vocab/merges entry of the wrong type.
TokenizerJson read_tokenizer_json(const std::filesystem::path& path);

}  // namespace ctune::tok
