// within() and beyond(): see margins.h. Records go to $CTUNE_MARGINS_DIR/margins-<pid>.tsv as
// "margin<TAB>Suite.Test<TAB>what<TAB>measured<TAB>relation<TAB>tolerance", one line per call
// (relation: "<=" for within, ">=" for beyond).
#include "margins.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ctune::test {
namespace {

std::string current_test() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : std::string("(no test)");
}

// Tabs and newlines would break the record format.
std::string one_field(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

void record(const std::string& what, double measured, double tolerance, double margin, const char* relation) {
  const std::string test = current_test();
  std::printf("[margin] %s: %s: measured %.3g, %s %.3g, margin %.3f\n", test.c_str(), what.c_str(), measured, relation,
              tolerance, margin);
  const char* dir = std::getenv("CTUNE_MARGINS_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = std::string(dir) + "/margins-" + std::to_string(::getpid()) + ".tsv";
  if (std::FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%.6g\t%s\t%s\t%.6g\t%s\t%.6g\n", margin, one_field(test).c_str(), one_field(what).c_str(), measured,
                 relation, tolerance);
    std::fclose(f);
  }
}

}  // namespace

::testing::AssertionResult within(const std::string& what, double measured, double tolerance) {
  const double margin = std::isnan(measured) ? INFINITY : (tolerance > 0 ? measured / tolerance : (measured > 0 ? INFINITY : 0));
  record(what, measured, tolerance, margin, "<=");
  if (measured <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": measured " << measured << ", tolerance " << tolerance;
}

::testing::AssertionResult beyond(const std::string& what, double measured, double floor) {
  const double margin = std::isnan(measured) ? INFINITY : (measured > 0 ? floor / measured : INFINITY);
  record(what, measured, floor, margin, ">=");
  if (measured >= floor) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": measured " << measured << ", must be at least " << floor;
}

}  // namespace ctune::test
