// The template lexer; see lexer.h. Follows the states of Jinja2's own lexer (root text, then
// the inside of a tag until its balanced end), so that whitespace handling matches it byte for
// byte.
#include "template/lexer.h"

#include <cstring>

#include "core/error.h"
#include "template/pystr.h"

namespace ctune::tmpl {

void position_of(const std::string& source, std::size_t offset, int& line, int& column) {
  line = 1;
  column = 1;
  for (std::size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
}

namespace {

[[noreturn]] void fail(const std::string& src, std::size_t at, const std::string& what) {
  int line, column;
  position_of(src, at, line, column);
  throw TemplateError("template line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
}

bool is_space_at(const std::string& s, std::size_t i, std::size_t& next) {
  if (i >= s.size()) return false;
  next = i;
  return is_py_space(decode_code_point(s, next));
}

// Python's str.rstrip() of s[begin, end): the new end.
std::size_t rstrip_end(const std::string& s, std::size_t begin, std::size_t end) {
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::size_t next;
    if (!is_space_at(s, start, next)) break;
    end = start;
  }
  return end;
}

std::size_t skip_space(const std::string& s, std::size_t i) {
  std::size_t next;
  while (is_space_at(s, i, next)) i = next;
  return i;
}

bool starts_with(const std::string& s, std::size_t i, const char* lit) { return s.compare(i, std::strlen(lit), lit) == 0; }

bool is_name_start(unsigned char c) { return c == '_' || std::isalpha(c) || c >= 0x80; }
bool is_name_char(unsigned char c) { return c == '_' || std::isalnum(c) || c >= 0x80; }

// Decodes a string literal's body as Python's "unicode-escape" codec does (Jinja2 decodes
// literals that way).
std::string decode_string(const std::string& src, std::size_t begin, std::size_t end) {
  std::string out;
  for (std::size_t i = begin; i < end; ++i) {
    if (src[i] != '\\' || i + 1 >= end) {
      out += src[i];
      continue;
    }
    const char c = src[++i];
    auto hex = [&](int n) -> std::optional<std::uint32_t> {
      std::uint32_t v = 0;
      for (int k = 1; k <= n; ++k) {
        if (i + static_cast<std::size_t>(k) >= end) return std::nullopt;
        const char h = src[i + static_cast<std::size_t>(k)];
        if (!std::isxdigit(static_cast<unsigned char>(h))) return std::nullopt;
        v = v * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    switch (c) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const int n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        const auto v = hex(n);
        if (!v || *v > 0x10FFFF) fail(src, i - 1, std::string("invalid \\") + c + " escape in a string literal");
        append_code_point(out, *v);
        i += static_cast<std::size_t>(n);
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          std::uint32_t v = 0;
          int n = 0;
          while (n < 3 && i < end && src[i] >= '0' && src[i] <= '7') {
            v = v * 8 + static_cast<std::uint32_t>(src[i] - '0');
            ++i;
            ++n;
          }
          --i;
          append_code_point(out, v);
        } else {  // unknown escapes keep their backslash, as in Python
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {}

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      // Next tag start: {{ {% {# (with an optional - or + right after).
      std::size_t at = s_.find('{', pos);
      while (at != std::string::npos && at + 1 < s_.size() && s_[at + 1] != '{' && s_[at + 1] != '%' && s_[at + 1] != '#')
        at = s_.find('{', at + 1);
      if (at == std::string::npos || at + 1 >= s_.size()) {
        push(Tok::text, s_.substr(pos), pos);
        break;
      }
      const char kind = s_[at + 1];
      char sign = 0;
      if (at + 2 < s_.size() && (s_[at + 2] == '-' || s_[at + 2] == '+')) sign = s_[at + 2];
      const std::size_t inner = at + 2 + (sign ? 1 : 0);
      const std::size_t text_end = text_end_before(pos, at, sign, /*lstrip=*/kind != '{', line_starting);
      if (text_end > pos) push(Tok::text, s_.substr(pos, text_end - pos), pos);

      if (kind == '#') {
        pos = comment(inner, line_starting);
      } else if (kind == '%' && is_raw(inner)) {
        pos = raw(at, inner, line_starting);
      } else {
        pos = tag(at, inner, kind == '{', line_starting);
      }
    }
    push(Tok::eof, "", s_.size());
    return std::move(out_);
  }

 private:
  void push(Tok type, std::string value, std::size_t offset) {
    // Positions are computed incrementally: tokens come in source order.
    while (cursor_ < offset && cursor_ < s_.size()) {
      if (s_[cursor_] == '\n') {
        ++line_;
        column_ = 1;
      } else if ((static_cast<unsigned char>(s_[cursor_]) & 0xC0) != 0x80) {
        ++column_;
      }
      ++cursor_;
    }
    out_.push_back(Token{type, std::move(value), line_, column_});
  }

  // Where the text [begin, tag) ends once the tag's whitespace control is applied: `-` strips
  // all whitespace before it; otherwise lstrip_blocks (block and comment tags, not `+`) drops the
  // spaces and tabs between the start of the line and the tag, when the text has a line break
  // or starts a line itself.
  std::size_t text_end_before(std::size_t begin, std::size_t tag, char sign, bool lstrip, bool line_starting) const {
    if (sign == '-') return rstrip_end(s_, begin, tag);
    if (sign == '+' || !lstrip || tag == 0) return tag;
    const std::size_t nl = s_.rfind('\n', tag - 1);
    const std::size_t l_pos = (nl == std::string::npos || nl < begin) ? begin : nl + 1;
    if (!(l_pos > begin || line_starting) || l_pos >= tag) return tag;
    for (std::size_t i = l_pos; i < tag;) {
      std::size_t next;
      if (!is_space_at(s_, i, next)) return tag;
      i = next;
    }
    return l_pos;
  }

  // After a comment or block end: trim_blocks drops one \n unless the end was `+`.
  std::size_t comment(std::size_t i, bool& line_starting) {
    for (std::size_t k = i; k + 1 < s_.size(); ++k) {
      if (s_[k] != '#' || s_[k + 1] != '}') continue;
      std::size_t end = k + 2;
      const char before = k > i ? s_[k - 1] : 0;
      if (before == '-') end = skip_space(s_, end);
      else if (before != '+' && end < s_.size() && s_[end] == '\n') ++end;
      line_starting = end > 0 && s_[end - 1] == '\n';
      return end;
    }
    fail(s_, i, "missing end of comment tag");
  }

  bool is_raw(std::size_t i) const {
    i = skip_space(s_, i);
    if (!starts_with(s_, i, "raw")) return false;
    i = skip_space(s_, i + 3);
    return starts_with(s_, i, "%}") || starts_with(s_, i, "-%}");
  }

  std::size_t raw(std::size_t at, std::size_t i, bool& line_starting) {
    i = skip_space(s_, i) + 3;
    i = skip_space(s_, i);
    if (s_[i] == '-') i = skip_space(s_, i + 3);
    else i += 2;  // raw's own end keeps the following \n (Jinja2 applies no trim here)
    // {% endraw %} with its whitespace control.
    for (std::size_t k = s_.find("{%", i); k != std::string::npos; k = s_.find("{%", k + 2)) {
      std::size_t j = k + 2;
      char sign = 0;
      if (j < s_.size() && (s_[j] == '-' || s_[j] == '+')) sign = s_[j++];
      j = skip_space(s_, j);
      if (!starts_with(s_, j, "endraw")) continue;
      j = skip_space(s_, j + 6);
      char end_sign = 0;
      if (j < s_.size() && (s_[j] == '-' || s_[j] == '+')) end_sign = s_[j++];
      if (!starts_with(s_, j, "%}")) continue;
      j += 2;
      const std::size_t text_end = text_end_before(i, k, sign, /*lstrip=*/true, /*line_starting=*/false);
      if (text_end > i) push(Tok::text, s_.substr(i, text_end - i), i);
      if (end_sign == '-') j = skip_space(s_, j);
      else if (end_sign != '+' && j < s_.size() && s_[j] == '\n') ++j;
      line_starting = s_[j - 1] == '\n';
      return j;
    }
    fail(s_, at, "missing end of raw directive");
  }

  // The inside of {{ ... }} or {% ... %}: expression tokens until the balanced end.
  std::size_t tag(std::size_t at, std::size_t i, bool variable, bool& line_starting) {
    push(variable ? Tok::var_begin : Tok::block_begin, "", at);
    std::vector<char> balance;
    while (true) {
      i = skip_space(s_, i);
      if (i >= s_.size()) fail(s_, at, std::string("unexpected end of template, the tag opened here has no ") + (variable ? "}}" : "%}"));
      if (balance.empty()) {
        const char* close = variable ? "}}" : "%}";
        char sign = 0;
        std::size_t j = i;
        if (s_[j] == '-' || s_[j] == '+') sign = s_[j++];
        if (starts_with(s_, j, close) && !(variable && sign == '+')) {
          push(variable ? Tok::var_end : Tok::block_end, "", i);
          j += 2;
          if (sign == '-') j = skip_space(s_, j);
          else if (!variable && sign != '+' && j < s_.size() && s_[j] == '\n') ++j;
          line_starting = s_[j - 1] == '\n';
          return j;
        }
      }
      const auto c = static_cast<unsigned char>(s_[i]);
      if (std::isdigit(c)) {
        i = number(i, /*integer_only=*/i > 0 && s_[i - 1] == '.');  // `x.0` is an item index
      } else if (is_name_start(c)) {
        std::size_t j = i;
        while (j < s_.size() && is_name_char(static_cast<unsigned char>(s_[j]))) ++j;
        push(Tok::name, s_.substr(i, j - i), i);
        i = j;
      } else if (c == '\'' || c == '"') {
        std::size_t j = i + 1;
        while (j < s_.size() && s_[j] != static_cast<char>(c)) j += s_[j] == '\\' ? 2 : 1;
        if (j >= s_.size()) fail(s_, i, "unterminated string literal");
        push(Tok::string, decode_string(s_, i + 1, j), i);
        i = j + 1;
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                          ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        const char* found = nullptr;
        for (const char* op : ops)
          if (starts_with(s_, i, op)) {
            found = op;
            break;
          }
        if (!found) fail(s_, i, std::string("unexpected character '") + s_[i] + "'");
        const std::string op = found;
        if (op == "(" || op == "[" || op == "{") balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) fail(s_, i, "unexpected '" + op + "'");
          if (balance.back() != op[0]) fail(s_, i, "unexpected '" + op + "', expected '" + balance.back() + "'");
          balance.pop_back();
        }
        push(Tok::op, op, i);
        i += op.size();
      }
    }
  }

  std::size_t number(std::size_t i, bool integer_only) {
    std::size_t j = i;
    auto digits = [&](auto pred) {
      while (j < s_.size() && (pred(static_cast<unsigned char>(s_[j])) || (s_[j] == '_' && j + 1 < s_.size() && pred(static_cast<unsigned char>(s_[j + 1])))))
        ++j;
    };
    auto dec = [](unsigned char ch) { return std::isdigit(ch) != 0; };
    if (s_[i] == '0' && j + 1 < s_.size() && std::strchr("box", s_[i + 1])) {
      j = i + 2;
      digits([](unsigned char ch) { return std::isxdigit(ch) != 0; });
      push(Tok::integer, s_.substr(i, j - i), i);
      return j;
    }
    digits(dec);
    bool is_float = false;
    if (integer_only) {
      push(Tok::integer, s_.substr(i, j - i), i);
      return j;
    }
    if (j + 1 < s_.size() && s_[j] == '.' && std::isdigit(static_cast<unsigned char>(s_[j + 1]))) {
      ++j;
      digits(dec);
      is_float = true;
    }
    if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      std::size_t k = j + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        j = k;
        digits(dec);
        is_float = true;
      }
    }
    push(is_float ? Tok::floating : Tok::integer, s_.substr(i, j - i), i);
    return j;
  }

  const std::string& s_;
  std::vector<Token> out_;
  std::size_t cursor_ = 0;
  int line_ = 1, column_ = 1;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace ctune::tmpl
