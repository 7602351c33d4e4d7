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

// Runs CTUNE_BINARY --threads 2 <args...>; `shell` runs first in the same shell (a limit:
// "ulimit -v 4000000").
Run ctune(const std::vector<std::string>& args, const std::string& shell = "");

// ctune(args) run through `wrapper`, a command that runs the command after it: "timeout -s KILL
// 60" (a guard against a hang: status 137 when it fired), "setsid" (a process group and session
// of its own, so a test can signal the run's whole group).
Run ctune_through(const std::string& wrapper, const std::vector<std::string>& args);

// Runs CTUNE_BINARY --threads 2 <args...> on a pseudo-terminal (util-linux `script`), typing
// `input` into it: `out` is what the terminal shows (stdout and stderr, the typed input echoed).
// `env`: extra VAR=value settings (COLUMNS: the terminal's width, which no one set).
Run ctune_on_terminal(const std::vector<std::string>& args, const std::string& input, const std::vector<std::string>& env = {});

// Runs one CTUNE_BINARY --threads 1 <args...> per entry of `envs` at the same time, each with
// those extra VAR=value settings (the ranks of a multi-process run), and waits for all.
std::vector<Run> ctune_together(const std::vector<std::vector<std::string>>& envs, const std::vector<std::string>& args);

// The inputs of the small end-to-end runs: a random 2-layer Llama (hidden 32, byte tokenizer)
// in dir/model and arithmetic instructions in dir/train.jsonl and dir/eval.jsonl ("Add i and 3"
// -> "i+3", "Add i and 5" -> "i+5"). Returns false (with a gtest failure) when `init` fails.
bool write_tiny_model_and_data(const std::filesystem::path& dir, int train_records, int eval_records);

// CPU seconds (user + system) of the child processes this test has run and waited for so far
// (getrusage RUSAGE_CHILDREN): the difference around a ctune() call is that run's CPU time,
// which a loaded machine stretches far less than its wall time (docs/testing.md, "Time").
double children_cpu_seconds();

std::string slurp(const std::filesystem::path& path);
// Writes `text` to `path`, making its directory.
void write(const std::filesystem::path& path, const std::string& text);
int count_lines(const std::string& text);

// The last line a run printed on stderr (the one-line error of a failed run).
std::string last_line(const std::string& err);

// Exit status 1, exactly one stderr line starting "ctune: " and containing `must_contain`,
// nothing on stdout (gtest expectations, labelled with `context`).
void expect_one_line_failure(const Run& run, const std::string& must_contain, const std::string& context);

}  // namespace ctune::testing
