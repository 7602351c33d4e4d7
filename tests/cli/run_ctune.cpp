#include "run_ctune.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace ctune::testing {
namespace fs = std::filesystem;

namespace {
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

Run ctune(const std::vector<std::string>& args) {
  // Per-process names: CTest runs tests in parallel processes.
  const fs::path dir = CTUNE_TEST_DATA_DIR;
  const std::string tag = std::to_string(::getpid());
  const fs::path out = dir / ("cli-stdout-" + tag + ".txt"), err = dir / ("cli-stderr-" + tag + ".txt");
  std::string cmd = quote(CTUNE_BINARY) + " --threads 2";
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out.string()) + " 2>" + quote(err.string());
  const int raw = std::system(cmd.c_str());
  Run r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

void expect_one_line_failure(const Run& r, const std::string& must_contain, const std::string& context) {
  EXPECT_EQ(r.status, 1) << context << ": " << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << context << ": expected exactly one error line, got:\n" << r.err;
  EXPECT_EQ(r.err.rfind("ctune: ", 0), 0u) << context << ": " << r.err;
  EXPECT_NE(r.err.find(must_contain), std::string::npos) << context << ": expected \"" << must_contain << "\" in: " << r.err;
  EXPECT_TRUE(r.out.empty()) << context << ": unexpected stdout " << r.out;
}

}  // namespace ctune::testing
