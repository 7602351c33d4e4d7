// The Hugging Face side files that name special tokens and the add-BOS/EOS flags:
// tokenizer_config.json (bos_token, eos_token, pad_token, unk_token as strings or
// {"content": ...} objects; add_bos_token, add_eos_token) and special_tokens_map.json (the same
// token keys). They override what the tokenizer file itself implies, in that order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace ctune::tok {

using TokenLookup = std::function<std::optional<std::int32_t>(std::string_view)>;

// Applies the files found in `dir` (missing files are skipped) to `special`. FormatError naming
// the file and key when a token is not in the vocabulary or a value has the wrong type, or when
// a flag asks for a token that is not set.
void apply_special_token_files(const std::filesystem::path& dir, SpecialTokens& special,
                               const TokenLookup& lookup);

}  // namespace ctune::tok
