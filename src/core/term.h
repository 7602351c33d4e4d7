// A term of the memory ledger: a byte (or element) count and the formula that computes it, built together from
// named symbols and numbers, so the printed formula is the computation itself and cannot drift
// from it ("2 x L x nkv x d x T x B x c", each symbol's value in the ledger's symbol table).
// Operators: + - and x, integer / (floor), ceil_div(a, b), max(...), min(...). Zero terms drop out
// of sums and ones out of products, so conditional parts leave no trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctune {

class Term {
 public:
  Term() = default;  // 0
  static Term sym(std::string name, std::int64_t value);
  static Term num(std::int64_t value);

  std::int64_t value() const { return value_; }
  const std::string& text() const { return text_; }

  friend Term operator+(const Term& a, const Term& b);
  friend Term operator-(const Term& a, const Term& b);
  friend Term operator*(const Term& a, const Term& b);
  friend Term operator/(const Term& a, const Term& b);  // floor
  Term& operator+=(const Term& b) { return *this = *this + b; }

  static Term ceil_div(const Term& a, const Term& b);
  static Term max(const std::vector<Term>& terms);
  static Term min(const std::vector<Term>& terms);

 private:
  // How tightly the text binds: a sum 1, a product 2, a symbol, number or call 3.
  Term(std::int64_t value, std::string text, int binding) : value_(value), text_(std::move(text)), binding_(binding) {}
  std::string operand(int binding) const { return binding_ < binding ? "(" + text_ + ")" : text_; }
  bool is_number(std::int64_t v) const { return binding_ == 3 && text_ == std::to_string(v) && value_ == v; }

  std::int64_t value_ = 0;
  std::string text_ = "0";
  int binding_ = 3;
};

}  // namespace ctune
