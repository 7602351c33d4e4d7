// tokenizer.json `pre_tokenizer` section: splitting a normalized segment into the "words" the
// model encodes independently (Split with Regex/String patterns and the five delimiter
// behaviours, ByteLevel with the GPT-2 regex and byte-to-unicode mapping, Metaspace, Digits,
// Whitespace, WhitespaceSplit, Punctuation, BertPreTokenizer, Sequence). Semantics follow the
// Rust `tokenizers` crate.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace ctune::tok {

// A piece of text on its way to the model. `at_start` is true when the piece begins at offset 0
// of the original input (Metaspace's prepend_scheme "first" needs it).
struct PreToken {
  std::string text;
  bool at_start = false;
};

// How a Split keeps the delimiters it finds (Rust SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Cuts `text` into pieces given the sorted, non-overlapping `matches`: the delimiter
// bookkeeping shared by every splitting pre-tokenizer. With `invert`, matches and the text
// between them swap roles. Appends the non-empty pieces' spans to `out`.
void split_spans(std::size_t text_size, const std::vector<Span>& matches, SplitBehavior behavior, bool invert,
                 std::vector<Span>& out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their pre-tokenised pieces, in order.
  void pre_tokenize(std::vector<PreToken>& pieces) const;
  // Pre-tokenises one piece, appending the results to `out`.
  virtual void split(const PreToken& piece, std::vector<PreToken>& out) const = 0;
};

// Builds the pre-tokenizer described by `config`; nullptr for JSON null.
// UnsupportedError for an unknown "type", FormatError for malformed fields.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config, const std::string& where);

// GPT-2's pre-tokenisation regex, used by ByteLevel when use_regex is true.
extern const char* const kGpt2Pattern;

}  // namespace ctune::tok
