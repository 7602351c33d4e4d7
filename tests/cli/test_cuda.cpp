// device: cuda, end to end through the real binary. On a CPU build of LibTorch the recipe is
// refused with one line (what every CI machine checks); on a CUDA build with a GPU
// (scripts/gpu_check.sh) a run on the GPU follows the same run on the CPU: the same loss
// trajectory in fp32, an adapter that evaluates the same on the CPU, a resume from a GPU
// checkpoint, bf16 training that learns, and the GPU allocator's peak in the metrics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "run_ctune.h"

namespace {
namespace fs = std::filesystem;
using ctune::testing::ctune;
using Json = nlohmann::json;

const fs::path kDir = fs::path(CTUNE_TEST_DATA_DIR) / ("cuda-" + std::to_string(::getpid()));

std::string recipe() {
  const std::string d = kDir.string();
  return "model: {path: " + d + "/model}\n"
         "data: {train: " + d + "/train.jsonl, eval: " + d + "/eval.jsonl, format: instruct, instruct_template: chat,\n"
         "       chat_format: plain, max_seq_len: 64}\n"
         "peft: {method: lora, rank: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj, down_proj]}\n"
         "optimizer: {name: adamw, lr: 3.0e-3, weight_decay: 0.01}\n"
         "scheduler: {name: cosine, warmup_steps: 2}\n"
         "training: {batch_size: 4, grad_accum: 2, max_steps: 8, eval_every: 4}\n"
         "checkpoint: {every_n_steps: 4, keep_last: 2}\n";
}

struct Trajectory {
  std::vector<double> loss, eval_loss;
  std::vector<std::int64_t> peak;  // peak_mem_bytes per step
  std::int64_t measured_peak = 0;  // the memory record's
};

Trajectory read(const fs::path& run) {
  Trajectory t;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (j.contains("memory")) {
      t.measured_peak = j["memory"]["measured_peak_bytes"].get<std::int64_t>();
    } else if (j.contains("eval_loss")) {
      t.eval_loss.push_back(j["eval_loss"].get<double>());
    } else {
      t.loss.push_back(j["loss"].get<double>());
      t.peak.push_back(j["peak_mem_bytes"].get<std::int64_t>());
    }
  }
  return t;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = a.size() == b.size() && !a.empty() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

class Cuda : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(kDir);
    ASSERT_TRUE(ctune::testing::write_tiny_model_and_data(kDir, 70, 7));
    std::ofstream(kDir / "lora.yaml") << recipe();
  }
  static void TearDownTestSuite() { if (!std::getenv("CTUNE_KEEP_TEST_DATA")) fs::remove_all(kDir); }

  // Whether this build and machine train on a GPU; on a CPU build, that the refusal is one line.
  static bool gpu() {
    const auto v = ctune({"validate", (kDir / "lora.yaml").string(), "output_dir=" + (kDir / "probe").string(), "device=cuda"});
    if (v.status == 0) return true;
    if (v.err.find("CUDA build of LibTorch") != std::string::npos) {
      ctune::testing::expect_one_line_failure(v, "cuda needs a CUDA build of LibTorch", "device: cuda on a CPU build");
    } else {
      ctune::testing::expect_one_line_failure(v, "CUDA device(s) are visible", "device: cuda without a GPU");
    }
    return false;
  }

  static ctune::testing::Run train(const std::string& name, std::vector<std::string> overrides) {
    std::vector<std::string> args = {"train", (kDir / "lora.yaml").string(), "output_dir=" + (kDir / name).string()};
    args.insert(args.end(), overrides.begin(), overrides.end());
    return ctune(args);
  }
};

TEST_F(Cuda, TrainingOnTheGpuFollowsTheCpu) {
  if (!gpu()) GTEST_SKIP() << "no CUDA build or no GPU: device: cuda is refused with one line (checked)";
  const auto cpu = train("cpu", {"device=cpu"});
  ASSERT_EQ(cpu.status, 0) << cpu.err;
  const auto gpu = train("gpu", {"device=cuda"});
  ASSERT_EQ(gpu.status, 0) << gpu.err;
  const auto a = read(kDir / "cpu"), b = read(kDir / "gpu");
  // fp32 on both; only the order of reductions differs (cuBLAS and the fused attention).
  EXPECT_LT(max_difference(a.loss, b.loss), 1e-3);
  EXPECT_LT(max_difference(a.eval_loss, b.eval_loss), 1e-3);
  ASSERT_FALSE(b.peak.empty());
  for (auto p : b.peak) EXPECT_GT(p, 0) << "peak_mem_bytes on the GPU";
  EXPECT_GT(b.measured_peak, 0);

  // The adapter written from GPU tensors evaluates on the CPU as the run's last eval did.
  const auto eval = ctune({"eval", (kDir / "lora.yaml").string(), "--adapter", (kDir / "gpu" / "adapter").string(), "--json",
                           "device=cpu", "output_dir=" + (kDir / "eval").string()});
  ASSERT_EQ(eval.status, 0) << eval.err;
  EXPECT_NEAR(Json::parse(eval.out)["eval_loss"].get<double>(), b.eval_loss.back(), 1e-4);

  // Killed after step 5 (checkpoint at 4), resumed on the GPU: steps 5..8 follow the
  // uninterrupted run (GPU reductions need not repeat bit for bit, hence the tolerance).
  const std::vector<std::string> args = {"train", (kDir / "lora.yaml").string(), "output_dir=" + (kDir / "resumed").string(), "device=cuda"};
  const auto killed = ctune::testing::ctune_together({{"CTUNE_KILL_AT=step:5:after"}}, args);
  ASSERT_NE(killed[0].status, 0);
  auto resume_args = args;
  resume_args.push_back("--resume");
  const auto resumed = ctune(resume_args);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_LT(max_difference(read(kDir / "resumed").loss, b.loss), 1e-3);
}

TEST_F(Cuda, Bf16TrainingLearns) {
  if (!gpu()) GTEST_SKIP() << "no CUDA build or no GPU: device: cuda is refused with one line (checked)";
  const auto run = train("bf16", {"device=cuda", "precision=bf16", "training.max_steps=16"});
  ASSERT_EQ(run.status, 0) << run.err;
  const auto t = read(kDir / "bf16");
  ASSERT_EQ(t.loss.size(), 16u);
  for (double l : t.loss) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(t.loss.back(), t.loss.front());
}

}  // namespace
