// Metering and bounded building; see meter.h.
#include "template/meter.h"

#include <cstdint>

namespace ctune::tmpl {

Meter& unmetered() {
  struct Unmetered final : Meter {
    void charge(std::uint64_t) override {}
    std::size_t max_text() const override { return SIZE_MAX; }
    std::size_t max_items() const override { return SIZE_MAX; }
  };
  static Unmetered meter;
  return meter;
}

void fail_text_size(std::uint64_t bytes, std::size_t cap) {
  throw EvalError("a string of " + std::to_string(bytes) + " bytes exceeds the template output limit of " +
                  std::to_string(cap));
}

void fail_list_size(std::size_t items, std::size_t cap) {
  throw EvalError("a list of " + std::to_string(items) + " items exceeds the template limit of " + std::to_string(cap));
}

TextBuilder TextBuilder::excerpt(std::size_t cap) {
  TextBuilder b(cap);
  b.cut_ = true;
  return b;
}

void TextBuilder::expect(std::uint64_t more) const {
  if (more > cap_ - out_.size()) fail_text_size(out_.size() + more, cap_);
}

void TextBuilder::append(std::string_view s) {
  if (full_) return;
  if (s.size() <= cap_ - out_.size()) {
    out_.append(s);
    return;
  }
  if (!cut_) fail_text_size(out_.size() + s.size(), cap_);
  // Cut on a code point boundary: a UTF-8 continuation byte (10xxxxxx) never starts one.
  std::size_t keep = cap_ - out_.size();
  while (keep > 0 && (static_cast<unsigned char>(s[keep]) & 0xC0) == 0x80) --keep;
  out_.append(s.substr(0, keep));
  out_ += "...";
  full_ = true;
}

}  // namespace ctune::tmpl
