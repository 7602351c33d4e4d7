#include "run_ctune.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
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

double children_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string last_line(const std::string& err) {
  std::string text = err;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const auto pos = text.rfind('\n');
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

namespace {
Run ctune_with(const std::string& shell, const std::string& wrapper, const std::vector<std::string>& args) {
  // Per-process names: CTest runs tests in parallel processes.
  const fs::path dir = CTUNE_TEST_DATA_DIR;
  const std::string tag = std::to_string(::getpid());
  const fs::path out = dir / ("cli-stdout-" + tag + ".txt"), err = dir / ("cli-stderr-" + tag + ".txt");
  std::string cmd = (shell.empty() ? "" : shell + "; ") + (wrapper.empty() ? "" : wrapper + " ") + quote(CTUNE_BINARY) + " --threads 2";
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
}  // namespace

Run ctune(const std::vector<std::string>& args, const std::string& shell) { return ctune_with(shell, "", args); }

Run ctune_through(const std::string& wrapper, const std::vector<std::string>& args) { return ctune_with("", wrapper, args); }

Run ctune_on_terminal(const std::vector<std::string>& args, const std::string& input, const std::vector<std::string>& env) {
  const fs::path dir = CTUNE_TEST_DATA_DIR;
  const std::string tag = std::to_string(::getpid());
  const fs::path in = dir / ("tty-stdin-" + tag + ".txt"), out = dir / ("tty-out-" + tag + ".txt");
  std::ofstream(in, std::ios::binary) << input;
  std::string inner = "env";
  for (const auto& e : env) inner += " " + quote(e);
  inner += " " + quote(CTUNE_BINARY) + " --threads 2";
  for (const auto& a : args) inner += " " + quote(a);
  // -e: script exits with the command's status; -q: no banner; the log file is not needed.
  const std::string cmd = "script -qec " + quote(inner) + " /dev/null <" + quote(in.string()) + " >" + quote(out.string()) + " 2>&1";
  const int raw = std::system(cmd.c_str());
  Run r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(out);
  fs::remove(in);
  fs::remove(out);
  return r;
}

std::vector<Run> ctune_together(const std::vector<std::vector<std::string>>& envs, const std::vector<std::string>& args) {
  const fs::path dir = CTUNE_TEST_DATA_DIR;
  const std::string tag = std::to_string(::getpid());
  std::string cmd;
  auto file = [&](std::size_t i, const char* what) { return dir / ("cli-" + std::string(what) + "-" + tag + "-" + std::to_string(i)); };
  for (std::size_t i = 0; i < envs.size(); ++i) {
    std::string one = "env";
    for (const auto& e : envs[i]) one += " " + quote(e);
    one += " " + quote(CTUNE_BINARY) + " --threads 1";
    for (const auto& a : args) one += " " + quote(a);
    one += " >" + quote(file(i, "stdout").string()) + " 2>" + quote(file(i, "stderr").string());
    cmd += "(" + one + "; echo $? >" + quote(file(i, "status").string()) + ") & ";
  }
  cmd += "wait";
  std::system(cmd.c_str());
  std::vector<Run> runs(envs.size());
  for (std::size_t i = 0; i < envs.size(); ++i) {
    const std::string status = slurp(file(i, "status"));
    runs[i].status = status.empty() ? -1 : std::stoi(status);
    runs[i].out = slurp(file(i, "stdout"));
    runs[i].err = slurp(file(i, "stderr"));
    for (const char* what : {"stdout", "stderr", "status"}) fs::remove(file(i, what));
  }
  return runs;
}

bool write_tiny_model_and_data(const fs::path& dir, int train_records, int eval_records) {
  auto write = [](const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
  };
  write(dir / "config.json", R"({"model_type": "llama", "vocab_size": 320, "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": true,
      "torch_dtype": "float32"})");
  const auto init = ctune({"init", "--config", (dir / "config.json").string(), "--out", (dir / "model").string(), "--tokenizer", "byte"});
  EXPECT_EQ(init.status, 0) << init.err;
  std::string train, eval;
  for (int i = 0; i < train_records; ++i)
    train += R"({"instruction": "Add )" + std::to_string(i) + R"( and 3", "output": ")" + std::to_string(i + 3) + "\"}\n";
  for (int i = 0; i < eval_records; ++i)
    eval += R"({"instruction": "Add )" + std::to_string(i) + R"( and 5", "output": ")" + std::to_string(i + 5) + "\"}\n";
  write(dir / "train.jsonl", train);
  write(dir / "eval.jsonl", eval);
  return init.status == 0;
}

void expect_one_line_failure(const Run& r, const std::string& must_contain, const std::string& context) {
  EXPECT_EQ(r.status, 1) << context << ": " << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << context << ": expected exactly one error line, got:\n" << r.err;
  EXPECT_EQ(r.err.rfind("ctune: ", 0), 0u) << context << ": " << r.err;
  EXPECT_NE(r.err.find(must_contain), std::string::npos) << context << ": expected \"" << must_contain << "\" in: " << r.err;
  EXPECT_TRUE(r.out.empty()) << context << ": unexpected stdout " << r.out;
}

}  // namespace ctune::testing
