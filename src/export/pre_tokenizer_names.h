// Which llama.cpp pre-tokenizer ("tokenizer.ggml.pre") reproduces a byte-level tokenizer.json's
// pre_tokenizer. llama.cpp does not run the file's regex: it knows a fixed set of names, each
// with its own built-in pattern, and refuses a name it does not know. ctune maps by the exact
// pattern text:
//   Split(Llama-3 pattern: ...|\p{N}{1,3}|...) + ByteLevel(use_regex=false)   -> "llama-bpe"
//   Split(Qwen2 pattern:   ...|\p{N}|...)      + ByteLevel(use_regex=false)   -> "qwen2"
//   ByteLevel(use_regex=true) alone (GPT-2's built-in pattern)                -> "gpt-2"
// Anything else is refused with the pattern in the message (UnsupportedError), since a GGUF
// with the wrong name would load and silently tokenize differently. Names checked against the
// llama.cpp that node-llama-cpp 3.21.1 ships (src/llama-vocab.cpp).
#pragma once

#include <string>

#include "core/json.h"

namespace ctune::exporter {

inline constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// `pre_tokenizer` is the tokenizer.json section (null allowed); `where` names it in errors.
std::string llama_cpp_pre_tokenizer(const Json& pre_tokenizer, const std::string& where);

}  // namespace ctune::exporter
