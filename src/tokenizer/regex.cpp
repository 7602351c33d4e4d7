// Oniguruma wrapper. Compilation uses ONIG_SYNTAX_DEFAULT (Oniguruma's own syntax), the UTF-8
// encoding and no options: the configuration the `onig` Rust crate uses inside Hugging Face
// tokenizers, so \s, \p{L}, (?i:...) and friends behave identically.
#include "tokenizer/regex.h"

#include <oniguruma.h>

#include <mutex>

#include "core/error.h"
#include "core/json.h"

namespace ctune::tok {

struct Regex::Impl {
  OnigRegex regex = nullptr;
};

namespace {
void init_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

// The region holds capture offsets; one per thread avoids an allocation per search.
struct RegionHolder {
  OnigRegion* region = onig_region_new();
  ~RegionHolder() { onig_region_free(region, 1); }
};
}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(new Impl), pattern_(pattern) {
  init_oniguruma();
  OnigErrorInfo einfo;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  int rc = onig_new(&impl_->regex, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                    ONIG_SYNTAX_DEFAULT, &einfo);
  if (rc != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, rc, &einfo);
    impl_->regex = nullptr;
    throw FormatError(where + ": regex \"" + pattern + "\" does not compile (" +
                      reinterpret_cast<const char*>(msg) + ")");
  }
}

Regex::~Regex() {
  if (impl_ && impl_->regex) onig_free(impl_->regex);
}

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  thread_local RegionHolder holder;
  OnigRegion* region = holder.region;
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = str + text.size();
  std::size_t pos = 0;
  while (pos < text.size()) {
    int r = onig_search(impl_->regex, str, end, str + pos, end, region, ONIG_OPTION_NONE);
    if (r < 0) {
      if (r == ONIG_MISMATCH) break;
      OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(msg, r);
      throw FormatError("regex \"" + pattern_ + "\": search failed (" + reinterpret_cast<const char*>(msg) +
                        ")");
    }
    auto b = static_cast<std::size_t>(region->beg[0]);
    auto e = static_cast<std::size_t>(region->end[0]);
    if (e > b) {
      out.push_back({b, e});
      pos = e;
    } else {
      // Empty match: step over one character and search again.
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

Pattern::Pattern(const nlohmann::json& obj, const std::string& where) {
  if (obj.is_object() && obj.size() == 1) {
    if (auto it = obj.find("String"); it != obj.end() && it->is_string()) {
      literal_ = it->get<std::string>();
      if (literal_.empty()) throw FormatError(where + ": String pattern is empty");
      return;
    }
    if (auto it = obj.find("Regex"); it != obj.end() && it->is_string()) {
      regex_ = std::make_unique<Regex>(it->get<std::string>(), where);
      return;
    }
  }
  throw FormatError(where + ": expected {\"String\": ...} or {\"Regex\": ...}, found " +
                    obj.dump().substr(0, 80));
}

void Pattern::find_all(std::string_view text, std::vector<Span>& out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  std::size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
    out.push_back({pos, pos + literal_.size()});
    pos += literal_.size();
  }
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<Span> spans;
  find_all(text, spans);
  if (spans.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + spans.size() * content.size());
  std::size_t prev = 0;
  for (const Span& s : spans) {
    out.append(text.substr(prev, s.begin - prev));
    out.append(content);
    prev = s.end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace ctune::tok
