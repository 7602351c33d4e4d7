// A run whose checkpoints and result cannot fit the disk is refused before it starts, through
// the real binary (docs/planning.md, "Running out of disk"): before, it trained until its first
// checkpoint that did not fit and failed there, every step since the one before lost. The
// prediction (a checkpoint: the trainable weights in fp32, the optimizer state and the
// tokenizer's files; as many on disk at once as retention allows, plus the one being written)
// is held to the files a run writes.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/json.h"
#include "run_ctune.h"

namespace fs = std::filesystem;

namespace {
using ctune::Json;
using ctune::testing::ctune;
using ctune::testing::expect_one_line_failure;

const fs::path kDir = fs::path(CTUNE_TEST_DATA_DIR) / ("disk-" + std::to_string(::getpid()));

using ctune::testing::write;

std::int64_t bytes_under(const fs::path& dir) {
  std::int64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) bytes += static_cast<std::int64_t>(e.file_size());
  return bytes;
}

class Disk : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(kDir);
    // Full fine-tuning of 2.9 million parameters: a checkpoint of 34 MB, tensors nearly all of it.
    write(kDir / "config.json", R"({"model_type": "llama", "vocab_size": 320, "hidden_size": 256, "intermediate_size": 688,
      "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "tie_word_embeddings": true,
      "torch_dtype": "float32"})");
    ASSERT_EQ(ctune({"init", "--config", (kDir / "config.json").string(), "--out", (kDir / "model").string(), "--tokenizer", "byte"}).status, 0);
    std::string rows;
    for (int i = 0; i < 64; ++i) rows += R"({"text": "Story )" + std::to_string(i) + R"(: the cat sat on the mat and looked at the sun."})" "\n";
    write(kDir / "train.jsonl", rows);
  }
  static void TearDownTestSuite() { fs::remove_all(kDir); }

  static std::string recipe(const fs::path& output_dir) {
    return "output_dir: " + output_dir.string() + "\nmodel: {path: " + (kDir / "model").string() + "}\n" +
           "data: {train: " + (kDir / "train.jsonl").string() + ", format: text, max_seq_len: 32, packing: true}\n"
           "peft: {method: none}\noptimizer: {name: adamw, lr: 1.0e-4}\nscheduler: {name: constant}\n"
           "training: {batch_size: 2, max_steps: 12}\ncheckpoint: {every_n_steps: 4, keep_last: 3}\n";
  }
};

// What `estimate` predicts the run writes is what it writes: a checkpoint's files and the
// result's, and the plan's "disk" line says the same.
TEST_F(Disk, ThePredictionIsWhatTheRunWrites) {
  const fs::path run = kDir / "run";
  write(kDir / "run.yaml", recipe(run));
  const auto estimate = ctune({"estimate", (kDir / "run.yaml").string(), "--json"});
  ASSERT_EQ(estimate.status, 0) << estimate.err;
  const Json disk = Json::parse(estimate.out)["disk"];
  const auto checkpoint = disk["checkpoint_bytes"].get<std::int64_t>(), result = disk["result_bytes"].get<std::int64_t>();
  // Checkpoints at steps 4, 8 and 12, all kept, and the result after them.
  EXPECT_EQ(disk["checkpoints_at_once"].get<std::int64_t>(), 3);
  EXPECT_EQ(disk["peak_bytes"].get<std::int64_t>(), 3 * checkpoint + result);
  const auto r = ctune({"train", (kDir / "run.yaml").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("more on disk (3 checkpoints at once), of "), std::string::npos) << r.err;
  // The state's small files (trainer_state.json, rng.safetensors, recipe.yaml, MANIFEST.json,
  // config.json) and the safetensors headers are not predicted: 21 kB here.
  const std::int64_t small = 32000;
  for (const char* step : {"step_00000004", "step_00000008", "step_00000012"}) {
    const auto written = bytes_under(run / "checkpoints" / step);
    EXPECT_GE(written, checkpoint) << step;
    EXPECT_LE(written, checkpoint + small) << step;
  }
  const auto written = bytes_under(run / "model");
  EXPECT_GE(written, result);
  EXPECT_LE(written, result + small);
}

// Past the space free, in one line naming what it would write and the keep_last that fits; no
// output directory is made. A million kept checkpoints of 34 MB (34 TB) are past any test machine's disk.
TEST_F(Disk, ARunPastTheFreeSpaceIsRefusedWithTheKeepLastThatFits) {
  const fs::path run = kDir / "huge";
  write(kDir / "huge.yaml", recipe(run));
  const auto refused = ctune({"train", (kDir / "huge.yaml").string(), "training.max_steps=10000000", "checkpoint.every_n_steps=1",
                              "checkpoint.keep_last=1000000"});
  expect_one_line_failure(refused, "ctune: io error: " + run.string() + ": this run writes up to ", "past the disk");
  EXPECT_NE(refused.err.find("checkpoints of 34."), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("free on its filesystem; checkpoint.keep_last="), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(run)) << "a refused run leaves no output directory";
}

// On a filesystem of 60 MB (a tmpfs; needs root, skipped elsewhere): three checkpoints of 34 MB
// and the result cannot fit, one checkpoint and the result can. Before, the run trained 8 steps
// and failed writing step 8's checkpoint ("no space left on device"); now it is refused at once
// with the change that fits, and that change runs to the end in the same 60 MB.
TEST_F(Disk, ASmallFilesystemIsRefusedAtOnceAndItsAdviceFits) {
  const fs::path mount = kDir / "small-fs";
  fs::create_directories(mount);
  if (::mount("tmpfs", mount.c_str(), "tmpfs", 0, "size=60m") != 0) GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
  struct Unmount {
    fs::path dir;
    ~Unmount() { ::umount(dir.c_str()); }
  } unmount{mount};
  const fs::path run = mount / "run";
  write(kDir / "small.yaml", recipe(run));
  const auto refused = ctune({"train", (kDir / "small.yaml").string()});
  expect_one_line_failure(refused, "ctune: io error: " + run.string() + ": this run writes up to 114 MB more (3 checkpoints of 34.2 MB on disk at once when writing the result", "a small filesystem");
  EXPECT_NE(refused.err.find("; checkpoint.every_n_steps=0 (one checkpoint, at the end) fits"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(run));
  const auto fits = ctune({"train", (kDir / "small.yaml").string(), "checkpoint.every_n_steps=0"});
  ASSERT_EQ(fits.status, 0) << fits.err;
  EXPECT_TRUE(fs::exists(run / "model" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_00000012" / "MANIFEST.json"));
}

}  // namespace
