// Oniguruma wrapper. Tokenizer patterns compile with ONIG_SYNTAX_DEFAULT (Oniguruma's own
// syntax), the UTF-8 encoding and no options: the configuration the `onig` Rust crate uses inside
// Hugging Face tokenizers, so \s, \p{L}, (?i:...) and friends behave identically.
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

Regex::Regex(const std::string& pattern, const std::string& where, Syntax syntax) : impl_(new Impl), pattern_(pattern) {
  init_oniguruma();
  OnigErrorInfo einfo;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  int rc = onig_new(&impl_->regex, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                    syntax == Syntax::python ? ONIG_SYNTAX_PYTHON : ONIG_SYNTAX_DEFAULT, &einfo);
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

BoundedMatch Regex::search(std::string_view text, std::uint64_t max_steps) const {
  // One bound for every start position together (retry limit in search), and the same for one
  // (in match), whose default (10^7) would otherwise apply per position.
  std::unique_ptr<OnigMatchParam, decltype(&onig_free_match_param)> param(onig_new_match_param(), onig_free_match_param);
  onig_initialize_match_param(param.get());
  onig_set_retry_limit_in_search_of_match_param(param.get(), static_cast<unsigned long>(max_steps));
  onig_set_retry_limit_in_match_of_match_param(param.get(), static_cast<unsigned long>(max_steps));
  thread_local RegionHolder holder;
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = str + text.size();
  const int r = onig_search_with_param(impl_->regex, str, end, str, end, holder.region, ONIG_OPTION_NONE, param.get());
  BoundedMatch out;
  if (r >= 0) {
    out.found = true;
    out.span = {static_cast<std::size_t>(holder.region->beg[0]), static_cast<std::size_t>(holder.region->end[0])};
  } else if (r == ONIGERR_RETRY_LIMIT_IN_MATCH_OVER || r == ONIGERR_RETRY_LIMIT_IN_SEARCH_OVER) {
    out.over_bound = true;
  } else if (r != ONIG_MISMATCH) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r);
    throw FormatError("regex \"" + pattern_ + "\": search failed (" + reinterpret_cast<const char*>(msg) + ")");
  }
  return out;
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
