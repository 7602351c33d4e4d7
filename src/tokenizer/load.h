// Which tokenizer a model directory has, and loading it: the factory over the implementations
// (tokenizer/hf_tokenizer.h, tokenizer/sentencepiece_tokenizer.h), apart from the interface
// (tokenizer/tokenizer.h) they implement.
#pragma once

#include <filesystem>
#include <memory>

#include "tokenizer/tokenizer.h"

namespace ctune::tok {

// The file a model directory's tokenizer is read from: tokenizer.json when there is one, else
// tokenizer.model. Throws IoError naming `dir` when it has neither, or one that is not a
// regular file. Every reader of a directory's tokenizer (load_tokenizer, GGUF export) asks here.
std::filesystem::path tokenizer_file(const std::filesystem::path& dir);
// Whether load_tokenizer has something to read at `path`: a file, or a directory with either file.
bool has_tokenizer(const std::filesystem::path& path);

// Loads from a directory holding tokenizer.json (preferred) or tokenizer.model, or from a path
// to either file. Reads tokenizer_config.json and special_tokens_map.json beside it.
// Throws IoError (missing files) or FormatError/UnsupportedError (content) naming the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

}  // namespace ctune::tok
