// Running the real `ctune` binary from tests: exit status, stdout and stderr of one call.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ctune::testing {

struct Run {
  int status = -1;  // exit code, or 128 + signal
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs CTUNE_BINARY --threads 2 <args...>.
Run ctune(const std::vector<std::string>& args);

std::string slurp(const std::filesystem::path& path);
int count_lines(const std::string& text);

// Exit status 1, exactly one stderr line starting "ctune: " and containing `must_contain`,
// nothing on stdout (gtest expectations, labelled with `context`).
void expect_one_line_failure(const Run& run, const std::string& must_contain, const std::string& context);

}  // namespace ctune::testing
