// The live progress line (core/progress.h) as a user sees it: the real binary on a
// pseudo-terminal (util-linux `script`), its byte stream replayed through a minimal terminal
// (carriage return, newline, erase to end of line) to get the screen it leaves; and the same
// run off a terminal, whose stderr must stay plain lines and whose metrics.jsonl must not change.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/json.h"
#include "run_ctune.h"

namespace fs = std::filesystem;
using ctune::Json;

namespace {

using ctune::testing::ctune;
using ctune::testing::ctune_on_terminal;
using ctune::testing::ctune_together;
using ctune::testing::slurp;

const fs::path kData = CTUNE_TEST_DATA_DIR;
constexpr int kColumns = 60;

// The screen a terminal shows after `bytes`: \r to column 0, \n to a new line, ESC[K erases to
// the end of the line, other escape sequences (colours) draw nothing.
std::vector<std::string> render(const std::string& bytes) {
  std::vector<std::string> screen(1);
  std::size_t col = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c == '\x1b' && i + 1 < bytes.size() && bytes[i + 1] == '[') {
      std::size_t j = i + 2;
      while (j < bytes.size() && (std::isdigit(static_cast<unsigned char>(bytes[j])) || bytes[j] == ';')) ++j;
      if (j < bytes.size() && bytes[j] == 'K') screen.back().resize(std::min(col, screen.back().size()));
      i = j;
    } else if (c == '\r') {
      col = 0;
    } else if (c == '\n') {
      screen.emplace_back();
      col = 0;
    } else {
      std::string& line = screen.back();
      if (line.size() <= col) line.resize(col + 1, ' ');
      line[col++] = c;
    }
  }
  return screen;
}

// The live lines drawn: the text between a carriage return and the erase that ends it.
std::vector<std::string> live_draws(const std::string& bytes) {
  std::vector<std::string> out;
  for (std::size_t at = bytes.find("\x1b[K"); at != std::string::npos; at = bytes.find("\x1b[K", at + 1)) {
    const std::size_t cr = bytes.rfind('\r', at);
    if (cr == std::string::npos) continue;
    const std::string text = bytes.substr(cr + 1, at - cr - 1);
    if (!text.empty() && text.find('\n') == std::string::npos) out.push_back(text);
  }
  return out;
}

// Index of the first screen line at or after `from` that starts with `prefix`; -1 if none.
long find_line(const std::vector<std::string>& screen, const std::string& prefix, long from = 0) {
  for (long i = from; i < static_cast<long>(screen.size()); ++i)
    if (screen[static_cast<std::size_t>(i)].rfind(prefix, 0) == 0) return i;
  return -1;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// The records of metrics.jsonl without what depends on the clock or the machine's load.
std::vector<Json> stable_metrics(const fs::path& dir) {
  std::vector<Json> out;
  std::istringstream in(slurp(dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    Json j = Json::parse(line);
    if (!j.contains("loss") && !j.contains("eval_loss")) continue;  // the memory summary record
    for (const char* key : {"time", "tokens_per_s", "elapsed_s", "cpu_s", "sys_s", "peak_mem_bytes"}) j.erase(key);
    out.push_back(j);
  }
  return out;
}

class Progress : public ::testing::Test {
 protected:
  // Per process: CTest runs the two tests at the same time.
  static void SetUpTestSuite() {
    dir_ = kData / ("progress-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    ASSERT_TRUE(ctune::testing::write_tiny_model_and_data(dir_, 200, 40));
    std::ofstream(dir_ / "recipe.yaml") << "model: {path: " << (dir_ / "model").string() << "}\n"
                                        << "data: {train: " << (dir_ / "train.jsonl").string()
                                        << ", eval: " << (dir_ / "eval.jsonl").string() << ", max_seq_len: 256}\n"
                                        << "peft: {method: lora, rank: 4, alpha: 8}\n"
                                        << "training: {batch_size: 8, max_steps: 40, eval_every: 20}\n"
                                        << "checkpoint: {every_n_steps: 20}\n"
                                        << "logging: {every_n_steps: 10}\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path dir_;
};
fs::path Progress::dir_;

TEST_F(Progress, TrainOnATerminalDrawsOneLiveLinePerStage) {
  const fs::path tty_out = dir_ / "on-terminal", plain_out = dir_ / "plain";
  fs::remove_all(tty_out);
  fs::remove_all(plain_out);
  const std::string recipe = (dir_ / "recipe.yaml").string();
  const auto tty = ctune_on_terminal({"train", recipe, "output_dir=" + tty_out.string()}, "", {"COLUMNS=" + std::to_string(kColumns)});
  ASSERT_EQ(tty.status, 0) << tty.out;
  const auto screen = render(tty.out);
  const auto draws = live_draws(tty.out);

  // Every stage drew its live line, and none is wider than the terminal (a wrapped live line
  // cannot be redrawn in place).
  // A long path gives way at its start, keeping the counts: "...progress/train.jsonl  0 B/9.79 kB (0%)".
  for (const std::string stage : {"train.jsonl  ", "eval.jsonl  ", "loading ", "step ", "eval at step 20  ", "checkpoint step_00000020  ",
                                  "eval at step 40  ", "checkpoint step_00000040  ", "writing "}) {
    bool drawn = false;
    for (const auto& d : draws) drawn = drawn || d.find(stage) != std::string::npos;
    EXPECT_TRUE(drawn) << "no live line for \"" << stage << "\" among " << draws.size() << " draws";
  }
  for (const auto& d : draws) EXPECT_LT(d.size(), static_cast<std::size_t>(kColumns)) << "live line wider than the terminal: " << d;
  // The training line is redrawn as steps end, with the loss and the ETA.
  std::size_t step_draws = 0;
  for (const auto& d : draws) step_draws += d.rfind("step ", 0) == 0 && d.find("  loss ") != std::string::npos && d.find("  eta ") != std::string::npos;
  EXPECT_GE(step_draws, 1u) << joined(draws);

  // The screen it leaves: each stage's final line, in order, and the log lines intact between.
  long at = 0;
  for (const std::string line : {(dir_ / "train.jsonl").string() + ": 200 records, ", (dir_ / "eval.jsonl").string() + ": 40 records, ",
                                 std::string("loading "), std::string("eval at step 20: loss "),
                                 std::string("checkpoint step_00000020  "), std::string("eval at step 40: loss "),
                                 std::string("checkpoint step_00000040  "), std::string("step 40/40  loss "), std::string("writing ")}) {
    const long found = find_line(screen, line, at);
    EXPECT_GE(found, 0) << "\"" << line << "\" not on the screen after line " << at << ":\n" << joined(screen);
    if (found >= 0) at = found + 1;
  }
  std::size_t step_lines = 0;
  for (const auto& line : screen) {
    step_lines += line.rfind("step ", 0) == 0;
    // A log line never lands inside a live line.
    if (line.find(" info ") != std::string::npos) EXPECT_EQ(line.rfind("[", 0), 0u) << line;
  }
  EXPECT_EQ(step_lines, 1u) << "only the final training line stays:\n" << joined(screen);
  EXPECT_NE(find_line(screen, "checkpoint step_00000040  26 tensors"), -1) << joined(screen);  // 8 adapter, 16 AdamW, 2 RNG
  EXPECT_NE(find_line(screen, "loading " + (dir_ / "model").string() + "  20/20 tensors (100%)"), -1) << joined(screen);

  // Off a terminal: plain lines as before, no carriage returns or escapes, no stage lines.
  const auto plain = ctune({"train", recipe, "output_dir=" + plain_out.string()});
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.err.find('\r'), std::string::npos);
  EXPECT_EQ(plain.err.find("\x1b["), std::string::npos);
  for (const std::string line : {"step 10/40  loss ", "step 20/40  loss ", "eval at step 20: loss ", "step 40/40  loss ",
                                 "eval at step 40: loss "})
    EXPECT_NE(plain.err.find("\n" + line), std::string::npos) << line << "\n" << plain.err;
  EXPECT_EQ(plain.err.find("train.jsonl: 200 records"), std::string::npos) << plain.err;
  EXPECT_EQ(plain.err.find("checkpoint step_"), std::string::npos) << plain.err;

  // metrics.jsonl is the same either way.
  const auto a = stable_metrics(tty_out), b = stable_metrics(plain_out);
  EXPECT_EQ(a.size(), 42u);  // 40 steps, 2 evals
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "record " << i;

  // Log lines printed while a live line is up (fp16 steps skipped for overflow, logged from
  // inside training) go above it, whole.
  const auto skips = ctune_on_terminal({"train", recipe, "output_dir=" + (dir_ / "skips").string(), "--overwrite", "precision=fp16",
                                        "loss_scaling.init_scale=1e10", "loss_scaling.backoff_factor=0.001", "training.max_steps=6"},
                                       "", {"COLUMNS=" + std::to_string(kColumns)});
  ASSERT_EQ(skips.status, 0) << skips.out;
  const auto skip_screen = render(skips.out);
  EXPECT_NE(skips.out.find("step 1: inf/NaN gradients under loss scaling"), std::string::npos) << skips.out;
  for (const auto& line : skip_screen) {
    if (line.find("inf/NaN gradients") != std::string::npos) EXPECT_EQ(line.rfind("[", 0), 0u) << joined(skip_screen);
  }
  EXPECT_NE(find_line(skip_screen, "step 6/6  loss "), -1) << joined(skip_screen);

  // Merge and export on a terminal: progress by layer and by tensor.
  const auto merge = ctune_on_terminal({"merge", "--base", (dir_ / "model").string(), "--adapter", (tty_out / "adapter").string(),
                                        "--out", (dir_ / "merged").string(), "--overwrite"},
                                       "", {"COLUMNS=" + std::to_string(kColumns)});
  ASSERT_EQ(merge.status, 0) << merge.out;
  const auto merged = render(merge.out);
  EXPECT_NE(find_line(merged, "merging LoRA  4/4 layers (100%)"), -1) << joined(merged);
  EXPECT_NE(find_line(merged, "writing " + (dir_ / "merged").string() + "  20/20 tensors (100%)"), -1) << joined(merged);
  const fs::path gguf = dir_ / "merged.gguf";
  const auto exported = ctune_on_terminal({"export", "--model", (dir_ / "model").string(), "--adapter", (tty_out / "adapter").string(),
                                           "--out", gguf.string(), "--overwrite"},
                                          "", {"COLUMNS=" + std::to_string(kColumns)});
  ASSERT_EQ(exported.status, 0) << exported.out;
  const auto export_screen = render(exported.out);
  EXPECT_NE(find_line(export_screen, "writing " + gguf.string() + "  20/20 tensors (100%)"), -1) << joined(export_screen);
  EXPECT_NE(find_line(export_screen, "self-check of " + gguf.string() + "  in "), -1) << joined(export_screen);
  for (const auto* run : {&merge, &exported})
    for (const auto& d : live_draws(run->out)) EXPECT_LT(d.size(), static_cast<std::size_t>(kColumns)) << d;
}

TEST_F(Progress, EvalOnATerminalAndHeartbeatsOffIt) {
  const std::string model = (dir_ / "model").string(), data = (dir_ / "eval.jsonl").string();
  const auto tty = ctune_on_terminal({"eval", "--model", model, "--data", data, "data.max_seq_len=256", "--accuracy"}, "",
                                     {"COLUMNS=" + std::to_string(kColumns)});
  ASSERT_EQ(tty.status, 0) << tty.out;
  const auto screen = render(tty.out);
  EXPECT_NE(find_line(screen, "evaluating " + data + "  "), -1) << joined(screen);
  EXPECT_NE(find_line(screen, "exact match  40/40 examples (100%)"), -1) << joined(screen);

  // Many prompts: a progress line, the results printed whole above it.
  std::ofstream(dir_ / "prompts.txt") << "Add 1 and 3\nAdd 2 and 3\nAdd 3 and 3\n";
  const auto gen = ctune_on_terminal({"generate", "--model", model, "--prompt-file", (dir_ / "prompts.txt").string(), "--batch-size",
                                      "1", "--max-new-tokens", "3", "--json"},
                                     "", {"COLUMNS=" + std::to_string(kColumns)});
  ASSERT_EQ(gen.status, 0) << gen.out;
  const auto gen_screen = render(gen.out);
  EXPECT_NE(find_line(gen_screen, "generating  3/3 prompts (100%)  in "), -1) << joined(gen_screen);
  std::size_t results = 0;
  for (const auto& line : gen_screen) {
    if (line.find("\"prompt\"") == std::string::npos) continue;
    ++results;
    EXPECT_EQ(line.rfind("{\"prompt\":\"Add ", 0), 0u) << "a result line drawn into the live line: " << line;
    EXPECT_NO_THROW(Json::parse(line)) << line;
  }
  EXPECT_EQ(results, 3u) << joined(gen_screen);

  // Off a terminal a long stage prints a plain line now and then (every update here).
  const auto beats = ctune_together({{"CTUNE_HEARTBEAT_SECONDS=0"}}, {"eval", "--model", model, "--data", data, "data.max_seq_len=256"});
  ASSERT_EQ(beats[0].status, 0) << beats[0].err;
  const std::regex beat("\n" + data + "  [0-9.]+ k?B/[0-9.]+ kB \\([0-9]+%\\)[^\n]*records, [0-9]+ tokens");
  EXPECT_GE(std::distance(std::sregex_iterator(beats[0].err.begin(), beats[0].err.end(), beat), std::sregex_iterator()), 10)
      << beats[0].err;
  EXPECT_EQ(beats[0].err.find('\r'), std::string::npos);
  const auto bad = ctune_together({{"CTUNE_HEARTBEAT_SECONDS=soon"}}, {"eval", "--model", model, "--data", data});
  ctune::testing::expect_one_line_failure(bad[0], "CTUNE_HEARTBEAT_SECONDS: expected a number of seconds >= 0, found \"soon\"",
                                          "bad heartbeat");
  // Without the setting, the same short run prints none.
  const auto quiet = ctune({"eval", "--model", model, "--data", data, "data.max_seq_len=256"});
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find(data + "  "), std::string::npos) << quiet.err;
}

}  // namespace
