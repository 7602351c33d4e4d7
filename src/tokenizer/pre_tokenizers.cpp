// Pre-tokenizers of tokenizer.json. The delimiter behaviours reproduce the Rust crate's folds
// exactly, including its quirks (with MergedWithPrevious, a delimiter that follows another
// delimiter stays on its own). Character-class splitters (Digits, Punctuation) treat every
// matching character as its own delimiter, as the Rust `Fn(char) -> bool` patterns do.
#include "tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "tokenizer/component_json.h"
#include "tokenizer/unicode.h"

namespace ctune::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void split_spans(std::size_t text_size, const std::vector<Span>& matches, SplitBehavior behavior, bool invert,
                 std::vector<Span>& out) {
  struct Part {
    Span span;
    bool is_match;
  };
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  std::size_t prev = 0;
  for (const Span& m : matches) {
    if (m.begin > prev) parts.push_back({{prev, m.begin}, invert});
    parts.push_back({m, !invert});
    prev = m.end;
  }
  if (prev < text_size) parts.push_back({{prev, text_size}, invert});

  std::vector<Span> spans;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Part& p : parts)
        if (!p.is_match) spans.push_back(p.span);
      break;
    case SplitBehavior::Isolated:
      for (const Part& p : parts) spans.push_back(p.span);
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !spans.empty())
          spans.back().end = p.span.end;
        else
          spans.push_back(p.span);
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool next_match = false;  // walking right to left
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !next_match && !spans.empty())
          spans.back().begin = it->span.begin;
        else
          spans.push_back(it->span);
        next_match = it->is_match;
      }
      std::reverse(spans.begin(), spans.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match && previous_match && !spans.empty())
          spans.back().end = p.span.end;
        else
          spans.push_back(p.span);
        previous_match = p.is_match;
      }
      break;
    }
  }
  for (const Span& s : spans)
    if (s.end > s.begin) out.push_back(s);
}

void PreTokenizer::pre_tokenize(std::vector<PreToken>& pieces) const {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 4);
  for (const PreToken& p : pieces) split(p, out);
  pieces.swap(out);
}

namespace {

void emit_spans(const PreToken& piece, const std::vector<Span>& spans, std::vector<PreToken>& out) {
  for (const Span& s : spans) {
    out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
}

// Splits on single characters selected by a predicate.
void split_on_chars(const PreToken& piece, const std::function<bool(std::uint32_t)>& pred,
                    SplitBehavior behavior, std::vector<PreToken>& out) {
  std::vector<Span> matches, spans;
  const std::string& t = piece.text;
  std::size_t i = 0;
  while (i < t.size()) {
    std::size_t start = i;
    if (pred(next_code_point(t, i))) matches.push_back({start, i});
  }
  split_spans(t.size(), matches, behavior, false, spans);
  emit_spans(piece, spans, out);
}

SplitBehavior parse_behavior(const Json& config, const std::string& where) {
  std::string b = require_string(config, "behavior", where);
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  throw UnsupportedError(where + ".behavior \"" + b +
                         "\" is not supported (supported: Removed, Isolated, MergedWithPrevious, "
                         "MergedWithNext, Contiguous)");
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    std::vector<Span> matches, spans;
    pattern_.find_all(piece.text, matches);
    split_spans(piece.text.size(), matches, behavior_, invert_, spans);
    emit_spans(piece, spans, out);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, "ByteLevel pre-tokenizer");
  }
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    std::string text = piece.text;
    if (add_prefix_space_ && (text.empty() || text[0] != ' ')) text.insert(text.begin(), ' ');
    const auto& table = byte_to_unicode();
    auto map_bytes = [&](std::string_view s, bool at_start) {
      PreToken t;
      t.at_start = at_start;
      t.text.reserve(s.size() * 2);
      for (char c : s) t.text += table[static_cast<unsigned char>(c)];
      out.push_back(std::move(t));
    };
    if (!regex_) {
      if (!text.empty()) map_bytes(text, piece.at_start);
      return;
    }
    std::vector<Span> matches, spans;
    regex_->find_all(text, matches);
    split_spans(text.size(), matches, SplitBehavior::Isolated, false, spans);
    for (const Span& s : spans)
      map_bytes(std::string_view(text).substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::uint32_t replacement, PrependScheme scheme, bool split)
      : scheme_(scheme), split_(split) {
    append_utf8(rep_, replacement);
  }
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    std::string text;
    text.reserve(piece.text.size() + rep_.size());
    for (char c : piece.text) {
      if (c == ' ')
        text += rep_;
      else
        text.push_back(c);
    }
    bool starts_with_rep = text.compare(0, rep_.size(), rep_) == 0;
    if (!starts_with_rep &&
        (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && piece.at_start))) {
      text.insert(0, rep_);
    }
    PreToken whole{std::move(text), piece.at_start};
    if (!split_) {
      if (!whole.text.empty()) out.push_back(std::move(whole));
      return;
    }
    std::vector<Span> matches, spans;
    Pattern(rep_).find_all(whole.text, matches);
    split_spans(whole.text.size(), matches, SplitBehavior::MergedWithNext, false, spans);
    emit_spans(whole, spans, out);
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    split_on_chars(piece, is_numeric, individual_ ? SplitBehavior::Isolated : SplitBehavior::Contiguous, out);
  }

 private:
  bool individual_;
};

class PunctuationPreTokenizer : public PreTokenizer {
 public:
  explicit PunctuationPreTokenizer(SplitBehavior b) : behavior_(b) {}
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    split_on_chars(piece, is_punctuation, behavior_, out);
  }

 private:
  SplitBehavior behavior_;
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    split_on_chars(piece, is_whitespace, SplitBehavior::Removed, out);
  }
};

// Rust's Whitespace: the matches of \w+|[^\w\s]+ (runs of word characters, runs of other
// non-space characters); whitespace is dropped.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    const std::string& t = piece.text;
    std::vector<Span> spans;
    int run_class = 0;  // 0 none, 1 word, 2 other
    std::size_t i = 0;
    while (i < t.size()) {
      std::size_t start = i;
      std::uint32_t cp = next_code_point(t, i);
      int c = is_word_char(cp) ? 1 : is_whitespace(cp) ? 0 : 2;
      if (c != 0 && c == run_class)
        spans.back().end = i;
      else if (c != 0)
        spans.push_back({start, i});
      run_class = c;
    }
    emit_spans(piece, spans, out);
  }
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    std::vector<PreToken> words;
    split_on_chars(piece, is_whitespace, SplitBehavior::Removed, words);
    for (const PreToken& w : words) split_on_chars(w, is_punctuation, SplitBehavior::Isolated, out);
  }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> members)
      : members_(std::move(members)) {}
  void split(const PreToken& piece, std::vector<PreToken>& out) const override {
    std::vector<PreToken> pieces{piece};
    for (const auto& m : members_) m->pre_tokenize(pieces);
    for (auto& p : pieces) out.push_back(std::move(p));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> members_;
};

PrependScheme parse_prepend_scheme(const Json& config, const std::string& where) {
  // Files written before prepend_scheme existed carry add_prefix_space instead.
  if (config.contains("prepend_scheme") && !config["prepend_scheme"].is_null()) {
    std::string s = require_string(config, "prepend_scheme", where);
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    throw FormatError(where + ".prepend_scheme: expected always, first or never, found \"" + s + "\"");
  }
  return optional_bool(config, "add_prefix_space", where, true) ? PrependScheme::Always
                                                                : PrependScheme::Never;
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& config, const std::string& where) {
  if (config.is_null()) return nullptr;
  const std::string type =
      component_type(config, where,
                     {"Sequence", "Split", "ByteLevel", "Metaspace", "Digits", "Whitespace",
                      "WhitespaceSplit", "Punctuation", "BertPreTokenizer"});
  if (type == "Sequence")
    return std::make_unique<SequencePreTokenizer>(
        make_members<PreTokenizer>(config, "pretokenizers", where, make_pre_tokenizer));
  if (type == "Split") {
    Pattern pattern(require_field(config, "pattern", where), where + ".pattern");
    return std::make_unique<SplitPreTokenizer>(std::move(pattern), parse_behavior(config, where),
                                               optional_bool(config, "invert", where, false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(optional_bool(config, "add_prefix_space", where, true),
                                                   optional_bool(config, "use_regex", where, true));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(require_char(config, "replacement", where, "\xE2\x96\x81"),
                                                   parse_prepend_scheme(config, where),
                                                   optional_bool(config, "split", where, true));
  }
  if (type == "Digits")
    return std::make_unique<DigitsPreTokenizer>(optional_bool(config, "individual_digits", where, false));
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Punctuation") {
    SplitBehavior b = config.contains("behavior") ? parse_behavior(config, where) : SplitBehavior::Isolated;
    return std::make_unique<PunctuationPreTokenizer>(b);
  }
  return std::make_unique<BertPreTokenizer>();
}

}  // namespace ctune::tok
