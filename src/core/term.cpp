#include "core/term.h"

#include <algorithm>

namespace ctune {

Term Term::sym(std::string name, std::int64_t value) { return Term(value, std::move(name), 3); }

Term Term::num(std::int64_t value) { return Term(value, std::to_string(value), 3); }

Term operator+(const Term& a, const Term& b) {
  if (a.is_number(0)) return b;
  if (b.is_number(0)) return a;
  return Term(a.value_ + b.value_, a.operand(1) + " + " + b.operand(1), 1);
}

Term operator-(const Term& a, const Term& b) {
  if (b.is_number(0)) return a;
  return Term(a.value_ - b.value_, a.operand(1) + " - " + b.operand(2), 1);
}

Term operator*(const Term& a, const Term& b) {
  if (a.is_number(0) || b.is_number(0)) return Term::num(0);
  if (a.is_number(1)) return b;
  if (b.is_number(1)) return a;
  return Term(a.value_ * b.value_, a.operand(2) + " x " + b.operand(2), 2);
}

Term operator/(const Term& a, const Term& b) {
  if (b.is_number(1)) return a;
  return Term(a.value_ / b.value_, a.operand(2) + " / " + b.operand(3), 2);
}

Term Term::ceil_div(const Term& a, const Term& b) {
  if (b.is_number(1)) return a;
  return Term((a.value_ + b.value_ - 1) / b.value_, "ceil_div(" + a.text_ + ", " + b.text_ + ")", 3);
}

namespace {
Term call(const char* name, const std::vector<Term>& terms, bool largest) {
  if (terms.size() == 1) return terms.front();
  std::int64_t v = terms.front().value();
  std::string text = std::string(name) + "(";
  for (std::size_t i = 0; i < terms.size(); ++i) {
    v = largest ? std::max(v, terms[i].value()) : std::min(v, terms[i].value());
    text += (i ? ", " : "") + terms[i].text();
  }
  return Term::sym(text + ")", v);
}
}  // namespace

Term Term::max(const std::vector<Term>& terms) { return call("max", terms, true); }
Term Term::min(const std::vector<Term>& terms) { return call("min", terms, false); }

}  // namespace ctune
