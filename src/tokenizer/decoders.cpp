// Decoders of tokenizer.json, following the Rust crate: ByteLevel maps each token's characters
// back to bytes (a token with characters outside the byte table keeps its own UTF-8 bytes) and
// decodes everything lossily in one go; ByteFallback turns runs of "<0xAB>" tokens into text,
// one U+FFFD per byte when the run is not valid UTF-8; Metaspace drops the replacement
// character of the first token when a prefix was prepended at encoding time.
#include "tokenizer/decoders.h"

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/component_json.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace ctune::tok {
namespace {

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const std::size_t mark = bytes.size();
      bool mapped = true;
      std::size_t i = 0;
      while (i < t.size()) {
        int b = unicode_to_byte(next_code_point(t, i));
        if (b < 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, repair_utf8(bytes));
  }
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> members) : members_(std::move(members)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& m : members_) m->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> members_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;  // pending bytes
    std::size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (find_invalid_utf8(run) == std::string::npos) {
        out.push_back(run);
      } else {
        for (std::size_t k = 0; k < run_tokens; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& t : tokens) {
      int byte = parse_byte_token(t);
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_tokens;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // "<0xAB>" -> 0xAB, anything else -> -1.
  static int parse_byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::uint32_t content, std::size_t start, std::size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::size_t> offsets;  // byte offset of each character, plus the end
      std::vector<std::uint32_t> chars;
      std::size_t i = 0;
      while (i < t.size()) {
        offsets.push_back(i);
        chars.push_back(next_code_point(t, i));
      }
      offsets.push_back(t.size());
      std::size_t first = 0, last = chars.size();
      while (first < start_ && first < chars.size() && chars[first] == content_) ++first;
      for (std::size_t k = 0; k < stop_ && last > first && chars[last - 1] == content_; ++k) --last;
      t = t.substr(offsets[first], offsets[last] - offsets[first]);
    }
  }

 private:
  std::uint32_t content_;
  std::size_t start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::uint32_t replacement, bool prefix_added)
      : replacement_(replacement), prefix_added_(prefix_added) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      const std::string& t = tokens[k];
      std::string out;
      out.reserve(t.size());
      std::size_t i = 0;
      while (i < t.size()) {
        std::size_t start = i;
        std::uint32_t cp = next_code_point(t, i);
        if (cp != replacement_)
          out.append(t, start, i - start);
        else if (!(k == 0 && prefix_added_))
          out.push_back(' ');
      }
      tokens[k] = std::move(out);
    }
  }

 private:
  std::uint32_t replacement_;
  bool prefix_added_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      tokens[k] = Pattern(suffix_).replace_all(tokens[k], k + 1 == tokens.size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& config, const std::string& where) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(
      config, where,
      {"Sequence", "ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace", "BPEDecoder"});
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Sequence")
    return std::make_unique<SequenceDecoder>(make_members<Decoder>(config, "decoders", where, make_decoder));
  if (type == "Replace") {
    Pattern pattern(require_field(config, "pattern", where), where + ".pattern");
    return std::make_unique<ReplaceDecoder>(std::move(pattern), require_string(config, "content", where));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    std::int64_t start = optional_int(config, "start", where, 0),
                 stop = optional_int(config, "stop", where, 0);
    if (start < 0 || stop < 0) throw FormatError(where + ": start and stop must be >= 0");
    return std::make_unique<StripDecoder>(require_char(config, "content", where, " "),
                                          static_cast<std::size_t>(start), static_cast<std::size_t>(stop));
  }
  if (type == "Metaspace") {
    bool prefix_added = optional_bool(config, "add_prefix_space", where, true);
    if (auto scheme = json_string(config, "prepend_scheme", where)) prefix_added = *scheme != "never";
    return std::make_unique<MetaspaceDecoder>(require_char(config, "replacement", where, "\xE2\x96\x81"),
                                              prefix_added);
  }
  return std::make_unique<BpeSuffixDecoder>(optional_string(config, "suffix", where, "</w>"));
}

}  // namespace ctune::tok
