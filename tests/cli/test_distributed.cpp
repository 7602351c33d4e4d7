// Several ranks through the real binary: `--nproc N` and ranks started by hand with the torchrun
// or Slurm variables, with replicated or sharded optimizer state, compute the loss trajectory of
// one process with the same global batch; sharded state written by 4 ranks resumes on 2;
// sharded checkpoints consolidate into what the run's whole result holds;
// a rank that dies or freezes makes the others exit non-zero within distributed.timeout_s,
// naming it; the run then resumes exactly; SIGTERM stops every rank after the same step with a
// checkpoint, and so does Ctrl-Z on the launcher; the launcher's store is a private socket that a
// stranger cannot change, a stranger's keys on a torchrun store are harmless, and a checkpoint
// that lacks a rank's shard is skipped on resume.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/json.h"
#include "margins.h"
#include "run_ctune.h"

namespace fs = std::filesystem;

namespace {
using ctune::Json;
using ctune::test::within;
using ctune::testing::ctune;
using ctune::testing::ctune_together;

const fs::path kDir = fs::path(CTUNE_TEST_DATA_DIR) / ("distributed-" + std::to_string(::getpid()));

using ctune::testing::write;

// Per-rank batch 2, accumulation 2; no dropout (each rank draws its own dropout masks, so a
// run with dropout is a different sample of the same computation, not the same numbers).
std::string recipe(const std::string& method, const fs::path& model = kDir / "model") {
  const std::string d = kDir.string();
  const std::string peft = method == "lora" ? "peft: {method: lora, rank: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj, down_proj]}\n"
                                            : "peft: {method: none}\n";
  return "model: {path: " + model.string() + "}\n"
         "data: {train: " + d + "/train.jsonl, eval: " + d + "/eval.jsonl, format: instruct, instruct_template: chat,\n"
         "       chat_format: plain, max_seq_len: 64}\n" + peft +
         "optimizer: {name: adamw, lr: 3.0e-3, weight_decay: 0.01}\n"
         "scheduler: {name: cosine, warmup_steps: 2}\n"
         "training: {batch_size: 2, grad_accum: 2, max_steps: 8, eval_every: 4}\n"
         "checkpoint: {every_n_steps: 2, keep_last: 2}\n"
         "distributed: {timeout_s: 30}\n";
}

// Online RL on `n` prompts "Add i and 3 = " (answer i + 3) written to `file`: recipe(`method`)
// with that data, no evaluation, and `objective` (its objective and reward lines) appended. The
// rewards: the answer contained, and a format about half the random texts meet (a letter).
std::string prompt_recipe(const std::string& method, const fs::path& file, int n, const std::string& objective) {
  std::string prompts;
  for (int i = 0; i < n; ++i) prompts += R"({"prompt": "Add )" + std::to_string(i) + R"( and 3 = ", "answer": ")" + std::to_string(i + 3) + "\"}\n";
  write(file, prompts);
  std::string text = recipe(method);
  const auto data = text.find("data: {"), end = text.find("}\n", data);
  text.replace(data, end + 2 - data, "data: {train: " + file.string() + ", format: prompt, chat_format: plain, max_seq_len: 64}\n");
  text.replace(text.find(", eval_every: 4"), std::string(", eval_every: 4").size(), "");
  return text + objective + "reward: {contains: {field: answer}, format: {pattern: '[\\s\\S]*[a-z][\\s\\S]*'}}\n";
}

// Per step of `run` (its metrics.jsonl lines with a loss): "step N key value ...", the values as
// written: figures that must be equal, not close.
std::vector<std::string> step_figures(const fs::path& run, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (!j.contains("loss")) continue;
    std::string row = "step " + j["step"].dump();
    for (const auto& key : keys) row += " " + key + " " + j[key].dump();
    out.push_back(row);
  }
  return out;
}

class Distributed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(kDir);
    ASSERT_TRUE(ctune::testing::write_tiny_model_and_data(kDir, 70, 7));
    for (const char* method : {"full", "lora"}) write(kDir / (std::string(method) + ".yaml"), recipe(method));
  }
  static void TearDownTestSuite() { if (!std::getenv("CTUNE_KEEP_TEST_DATA")) fs::remove_all(kDir); }
};

struct Record {
  std::string what;  // "step N" or "eval N"
  double value = 0;
  std::string text;  // the number as written
};

std::vector<Record> trajectory(const fs::path& run) {
  std::vector<Record> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (j.contains("memory")) continue;
    const bool train = j.contains("loss");
    const Json& v = train ? j["loss"] : j["eval_loss"];
    out.push_back({(train ? "step " : "eval ") + j["step"].dump(), v.get<double>(), v.dump()});
  }
  return out;
}

// The same trajectory (same records) within `tolerance` on every loss; the largest difference.
double max_difference(const std::vector<Record>& a, const std::vector<Record>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = a.size() == b.size() && !a.empty() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].what, b[i].what);
    worst = std::max(worst, std::abs(a[i].value - b[i].value));
  }
  return worst;
}

// Identical text, record by record: a resumed run continues exactly.
void expect_identical(const std::vector<Record>& a, const std::vector<Record>& b, const std::string& context) {
  ASSERT_EQ(a.size(), b.size()) << context;
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].what + " " + a[i].text, b[i].what + " " + b[i].text) << context;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// torchrun's variables for `n` ranks on this machine (rank 0 hosts the store), plus `extra`.
std::vector<std::vector<std::string>> torchrun_env(int n, const std::vector<std::string>& extra = {}) {
  const std::string port = std::to_string(free_port());
  std::vector<std::vector<std::string>> envs;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> e = {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(n), "LOCAL_RANK=" + std::to_string(r),
                                  "LOCAL_WORLD_SIZE=" + std::to_string(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port};
    e.insert(e.end(), extra.begin(), extra.end());
    envs.push_back(e);
  }
  return envs;
}

// One process with the global batch (per-rank batch 2 x `ranks`).
std::vector<Record> one_process(const std::string& method, int ranks) {
  const fs::path run = kDir / (method + "-one-" + std::to_string(ranks));
  if (!fs::exists(run / "metrics.jsonl")) {
    const auto r = ctune({"train", (kDir / (method + ".yaml")).string(), "output_dir=" + run.string(),
                          "training.batch_size=" + std::to_string(2 * ranks)});
    EXPECT_EQ(r.status, 0) << r.err;
  }
  return trajectory(run);
}

// The acceptance figure of sharded and replicated training: N ranks follow one process's loss
// trajectory within 1e-5 (fp32). The two differ only in how the gradient sums are grouped (each
// rank sums its rows, then the ranks' sums are added): fp32 reassociation, about 1e-7 relative
// per step on losses near 5 (measured 2e-7 to 7e-7 over eight steps), so 1e-5 leaves room for
// drift and still catches a missing or wrong reduction: one process trained on one rank's rows
// alone (batch 2 instead of 4) is 2e-2 to 6e-2 away from the global-batch run by step 3.
constexpr double kSameNumbers = 1e-5;

TEST_F(Distributed, RanksComputeWhatOneProcessComputesOnTheGlobalBatch) {
  for (const std::string strategy : {"no_shard", "shard_grad_op", "full_shard"})
  for (const std::string method : {"full", "lora"}) {
    for (int ranks : {2, 4}) {
      const std::string tag = strategy + " " + method + " x" + std::to_string(ranks);
      const fs::path run = kDir / (strategy + "-" + method + "-nproc-" + std::to_string(ranks));
      const auto r = ctune({"train", (kDir / (method + ".yaml")).string(), "output_dir=" + run.string(), "--nproc",
                            std::to_string(ranks), "distributed.strategy=" + strategy});
      ASSERT_EQ(r.status, 0) << tag << "\n" << r.err;
      // Rank 0 reports; every line of the ranks is prefixed.
      EXPECT_NE(r.err.find("[rank 0] "), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("ranks        " + std::to_string(ranks) + " (1 node, " + strategy + " over gloo; global batch " +
                           std::to_string(2 * ranks) + " x 2 rows)"),
                std::string::npos)
          << r.err;
      const auto got = trajectory(run);
      ASSERT_EQ(got.size(), 8u + 2u) << tag;
      EXPECT_TRUE(within(tag + " loss trajectory vs one process", max_difference(got, one_process(method, ranks)), kSameNumbers));
      EXPECT_TRUE(fs::exists(run / (method == "lora" ? "adapter/adapter_model.safetensors" : "model/model.safetensors"))) << tag;
    }
  }
}

// A mixture of experts (recipes/models/qwen3-moe-tiny.json with 4 experts, 2 per token, a
// dense first layer): ranks route their own rows, so which experts have gradients, and in what
// order, differs between them. With the routers' aux loss off (each rank's is over its own
// tokens, as under transformers with DDP): replicated ranks follow one process on the global
// batch, as do sharded LoRA runs; sharded full fine-tuning steps an expert that no token of the
// global batch reached with a zero gradient where one process skips it (a flat shard's
// optimizer state is per element; docs/distributed.md#mixtures-of-experts), and these routers
// leave an expert idle within a step or two, so there full_shard (which defers its reductions
// with experts) must compute exactly what shard_grad_op computes. LoRA with the routers trained
// follows one process under every strategy.
TEST_F(Distributed, ExpertsShardAndFollowOneProcess) {
  const fs::path moe = kDir / "moe-model";
  Json config = ctune::read_json_file(CTUNE_SOURCE_DIR "/recipes/models/qwen3-moe-tiny.json");
  config["num_experts"] = 4;
  config["num_experts_per_tok"] = 2;
  write(kDir / "moe.json", config.dump());
  const auto init = ctune({"init", "--config", (kDir / "moe.json").string(), "--out", moe.string(), "--tokenizer", "byte", "--seed", "5"});
  ASSERT_EQ(init.status, 0) << init.err;
  // lora_router: the routers train too (peft.train_router), fp32 weights whole on every rank.
  for (const std::string method : {"full", "lora", "lora_router"}) {
    const fs::path yaml = kDir / ("moe-" + method + ".yaml");
    std::string text = recipe(method == "full" ? "full" : "lora", moe) + "moe: {aux_loss_coef: 0.0}\n";
    if (method == "lora_router") text.replace(text.find("down_proj]}"), 11, "down_proj], train_router: true}");
    write(yaml, text);
    const fs::path one = kDir / ("moe-" + method + "-one");
    const auto single = ctune({"train", yaml.string(), "output_dir=" + one.string(), "training.batch_size=4"});
    ASSERT_EQ(single.status, 0) << single.err;
    for (const std::string strategy : {"no_shard", "shard_grad_op", "full_shard"}) {
      const std::string tag = "moe " + strategy + " " + method + " x2";
      const fs::path run = kDir / ("moe-" + strategy + "-" + method);
      const auto r = ctune({"train", yaml.string(), "output_dir=" + run.string(), "--nproc", "2", "distributed.strategy=" + strategy});
      ASSERT_EQ(r.status, 0) << tag << "\n" << r.err;
      const auto got = trajectory(run);
      ASSERT_EQ(got.size(), 8u + 2u) << tag;
      const bool zero_steps_idle_experts = strategy != "no_shard" && method == "full";
      if (zero_steps_idle_experts && strategy == "shard_grad_op") continue;  // full_shard's peer
      const fs::path peer = zero_steps_idle_experts ? kDir / ("moe-shard_grad_op-" + method) : one;
      EXPECT_TRUE(within(tag + " loss trajectory vs " + peer.filename().string(), max_difference(got, trajectory(peer)), kSameNumbers));
    }
  }
  // The trained routers change the run (lr 3e-3 over 8 steps): far beyond the ranks' noise.
  EXPECT_TRUE(ctune::test::beyond("lora_router vs lora: loss trajectory", max_difference(trajectory(kDir / "moe-lora_router-one"),
                                                                                        trajectory(kDir / "moe-lora-one")), 1e-4));
}

TEST_F(Distributed, ARankWithoutRowsComputesOnAnIdleBatch) {
  // 70 rows in global batches of 4: step 9's second micro-batch is the epoch's short last batch
  // of 2 rows, which leaves ranks 0 and 2 without rows, and the 7 eval batches leave rank 3 one
  // short. Under full_shard every forward and backward is full of collectives, so those ranks
  // compute on an idle batch (no target, zero gradient) instead of skipping; the numbers stay
  // one process's.
  const std::string yaml = (kDir / "full.yaml").string();
  const fs::path run = kDir / "idle-ranks", alone = kDir / "idle-alone";
  const auto r = ctune({"train", yaml, "output_dir=" + run.string(), "--nproc", "4", "training.batch_size=1",
                        "training.max_steps=9", "distributed.strategy=full_shard", "distributed.prefetch=true"});
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(ctune({"train", yaml, "output_dir=" + alone.string(), "training.batch_size=4", "training.max_steps=9"}).status, 0);
  const auto got = trajectory(run);
  ASSERT_EQ(got.size(), 9u + 3u);
  EXPECT_TRUE(within("full_shard x4 with idle ranks: loss trajectory vs one process", max_difference(got, trajectory(alone)), kSameNumbers));
}

// DPO (and ORPO): a preference pair's two rows go to one rank. 35 pairs in global batches of one pair a
// rank: each epoch's last global batch is short (2 ranks: 1 pair, which a split by rows would
// cut in half; 4 ranks: 3 pairs over 4 ranks), and the ranks left without a pair compute on an
// idle batch. Under every strategy and both methods (LoRA's reference: adapters off; full
// fine-tuning's: a frozen copy laid out as the policy, sharded under full_shard, or log-probabilities
// precomputed through it) N ranks follow one process on the global batch.
TEST_F(Distributed, DpoPairsStayWholeAndRanksFollowOneProcess) {
  std::string pairs, eval;
  for (int i = 0; i < 35; ++i)
    pairs += R"({"prompt": "Add )" + std::to_string(i) + R"( and 3 = ", "chosen": ")" + std::to_string(i + 3) + R"(", "rejected": ")" +
             std::to_string(i + 5) + "\"}\n";
  for (int i = 0; i < 5; ++i)
    eval += R"({"prompt": "Add )" + std::to_string(i) + R"( and 9 = ", "chosen": ")" + std::to_string(i + 9) + R"(", "rejected": ")" +
            std::to_string(i + 8) + "\"}\n";
  write(kDir / "pairs.jsonl", pairs);
  write(kDir / "pairs-eval.jsonl", eval);
  // ORPO's NLL part is normalised by the chosen tokens of the whole step, not each rank's.
  for (const std::string method : {"full", "full_precomputed", "lora", "orpo_lora"}) {
    std::string text = recipe(method.rfind("full", 0) == 0 ? "full" : "lora");
    const auto data = text.find("data: {"), end = text.find("}\n", data);
    text.replace(data, end + 2 - data, "data: {train: " + (kDir / "pairs.jsonl").string() + ", eval: " + (kDir / "pairs-eval.jsonl").string() +
                                           ", format: preference, max_seq_len: 64}\n");
    text += method == "orpo_lora"          ? "objective: {name: orpo, beta: 0.5}\n"
            : method == "full_precomputed" ? "objective: {name: dpo, beta: 0.5, precompute_reference: true}\n"
                                           : "objective: {name: dpo, beta: 0.5}\n";
    const fs::path yaml = kDir / ("dpo-" + method + ".yaml");
    write(yaml, text);
    for (int ranks : {2, 4}) {
      const fs::path one = kDir / ("dpo-" + method + "-one-" + std::to_string(ranks));
      const auto single = ctune({"train", yaml.string(), "output_dir=" + one.string(), "training.batch_size=" + std::to_string(ranks),
                                 "training.max_steps=9"});
      ASSERT_EQ(single.status, 0) << single.err;
      for (const std::string strategy : {"no_shard", "shard_grad_op", "full_shard"}) {
        const std::string tag = "dpo " + strategy + " " + method + " x" + std::to_string(ranks);
        const fs::path run = kDir / ("dpo-" + strategy + "-" + method + "-" + std::to_string(ranks));
        const auto r = ctune({"train", yaml.string(), "output_dir=" + run.string(), "--nproc", std::to_string(ranks),
                              "training.batch_size=1", "training.max_steps=9", "distributed.strategy=" + strategy});
        ASSERT_EQ(r.status, 0) << tag << "\n" << r.err;
        const auto got = trajectory(run);
        ASSERT_EQ(got.size(), 9u + 3u) << tag;
        EXPECT_TRUE(within(tag + " loss trajectory vs one process", max_difference(got, trajectory(one)), kSameNumbers));
      }
    }
  }
}

// Each step's gradient norm: the loss of an online RL step on fresh samples is near 0 (the
// advantages are centred), its gradient is not.
std::vector<Record> grad_norms(const fs::path& run) {
  std::vector<Record> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (j.contains("loss")) out.push_back({"step " + j["step"].dump(), j["grad_norm"].get<double>(), j["grad_norm"].dump()});
  }
  return out;
}

// GRPO on several ranks: each rank samples, scores and trains whole groups (a prompt's
// num_generations completions) of its share of the prompts, every completion drawn from the
// sampling stream it has in one process, so the ranks sample what one process samples; rewards,
// lengths and scores are summed over the ranks, so the advantages (scale_rewards: batch, one
// std over the whole batch) and the step's figures are the whole batch's; the token aggregation's
// normaliser counts every rank's completion tokens. Each epoch's last global batch is short (4
// ranks: some train on idle batches). A quarter of the prompts are the eval split: each
// evaluation samples their completions anew, split over the ranks as training's. Under every
// strategy and both methods (the reference: adapters off, or a frozen copy sharded as the
// policy) N ranks follow one process: the same rewards and completion lengths exactly, in
// training and in evaluation, the losses within 1e-5.
TEST_F(Distributed, GrpoGroupsStayWholeAndRanksFollowOneProcess) {
  std::string prompts;
  for (int i = 0; i < 14; ++i)
    prompts += R"({"prompt": "Add )" + std::to_string(i) + R"( and 3 = ", "answer": ")" + std::to_string(i + 3) + "\"}\n";
  write(kDir / "prompts.jsonl", prompts);
  auto figures = [](const fs::path& run) {
    std::vector<std::string> out;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line);
      if (j.contains("eval_reward")) {  // the eval prompts' completions, split over the ranks as training's
        out.push_back("eval " + j["step"].dump() + " reward " + j["eval_reward"].dump() + " length " + j["eval_completions/mean_length"].dump() +
                      " format " + j["eval_rewards/format/mean"].dump());
      }
      if (!j.contains("loss")) continue;
      out.push_back("step " + j["step"].dump() + " reward " + j["reward"].dump() + " reward_std " + j["reward_std"].dump() + " length " +
                    j["completions/mean_length"].dump() + " format " + j["rewards/format/mean"].dump());
    }
    return out;
  };
  for (const std::string method : {"full", "lora"}) {
    std::string text = recipe(method);
    const auto data = text.find("data: {"), end = text.find("}\n", data);
    text.replace(data, end + 2 - data, "data: {train: " + (kDir / "prompts.jsonl").string() +
                                           ", eval_fraction: 0.25, format: prompt, chat_format: plain, max_seq_len: 64}\n");
    text.replace(text.find(", eval_every: 4"), std::string(", eval_every: 4").size(), ", eval_every: 3");
    text += "objective: {name: grpo, num_generations: 4, max_new_tokens: 5, beta: 0.05, scale_rewards: batch}\n"
            "reward: {contains: {field: answer}, format: {pattern: '[\\s\\S]*[a-z][\\s\\S]*'}}\n";  // about half the random texts hold a letter
    const fs::path yaml = kDir / ("grpo-" + method + ".yaml");
    write(yaml, text);
    for (int ranks : {2, 4}) {
      const fs::path one = kDir / ("grpo-" + method + "-one-" + std::to_string(ranks));
      const auto single = ctune({"train", yaml.string(), "output_dir=" + one.string(), "training.batch_size=" + std::to_string(ranks),
                                 "training.max_steps=5"});
      ASSERT_EQ(single.status, 0) << single.err;
      const auto expected = figures(one);
      ASSERT_EQ(expected.size(), 7u);  // 5 steps, evaluations after steps 3 and 5
      for (const std::string strategy : {"no_shard", "shard_grad_op", "full_shard"}) {
        const std::string tag = "grpo " + strategy + " " + method + " x" + std::to_string(ranks);
        const fs::path run = kDir / ("grpo-" + strategy + "-" + method + "-" + std::to_string(ranks));
        const auto r = ctune({"train", yaml.string(), "output_dir=" + run.string(), "--nproc", std::to_string(ranks),
                              "training.batch_size=1", "training.max_steps=5", "distributed.strategy=" + strategy});
        ASSERT_EQ(r.status, 0) << tag << "\n" << r.err;
        EXPECT_EQ(figures(run), expected) << tag << ": the same completions and rewards";
        EXPECT_TRUE(within(tag + " loss trajectory vs one process", max_difference(trajectory(run), trajectory(one)), kSameNumbers));
        EXPECT_TRUE(within(tag + " gradient norms vs one process", max_difference(grad_norms(run), grad_norms(one)), kSameNumbers));
      }
    }
  }
}

// GRPO on 2 ranks with num_iterations 2: a checkpoint inside a generation batch (step 3) holds
// each rank's part of the batch (gathered to rank 0), so a run killed in step 5 resumes inside
// the batch and follows the uninterrupted run (whole checkpoints under no_shard, sharded ones
// under full_shard); one process cannot take the two ranks' parts: refused in one line.
TEST_F(Distributed, GrpoResumesInsideAGenerationBatchOnTwoRanks) {
  const std::string yaml = (kDir / "grpo-iterations.yaml").string();
  write(yaml, prompt_recipe("lora", kDir / "iter-prompts.jsonl", 14,
                            "objective: {name: grpo, num_generations: 4, max_new_tokens: 5, beta: 0.05, num_iterations: 2, epsilon: 0.002}\n"));
  auto rewards = [](const fs::path& run) { return step_figures(run, {"reward", "clip_ratio/region_mean"}); };
  for (const std::string strategy : {"no_shard", "full_shard"}) {
    const std::vector<std::string> common = {"--nproc", "2", "training.batch_size=1", "training.max_steps=8", "checkpoint.every_n_steps=3",
                                             "distributed.strategy=" + strategy};
    auto train = [&](const fs::path& run, bool resume) {
      std::vector<std::string> args = {"train", yaml, "output_dir=" + run.string()};
      args.insert(args.end(), common.begin(), common.end());
      if (resume) args.push_back("--resume");
      return ctune(args);
    };
    const fs::path reference = kDir / ("grpo-iterations-" + strategy), run = kDir / ("grpo-iterations-killed-" + strategy);
    const auto ref = train(reference, false);
    ASSERT_EQ(ref.status, 0) << ref.err;
    ::setenv("CTUNE_KILL_AT", "step:5:mid@1", 1);
    EXPECT_EQ(train(run, false).status, 137) << strategy;
    ::unsetenv("CTUNE_KILL_AT");
    const fs::path alone = kDir / ("grpo-iterations-alone-" + strategy);
    fs::copy(run, alone, fs::copy_options::recursive);
    const auto resumed = train(run, true);
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_NE(resumed.err.find("at step 3"), std::string::npos) << resumed.err;
    EXPECT_EQ(rewards(run), rewards(reference)) << strategy << ": resumed inside a generation batch, the completions differ";
    EXPECT_TRUE(within("grpo " + strategy + " resumed inside a generation batch: loss trajectory", max_difference(trajectory(run), trajectory(reference)),
                       kSameNumbers));
    const auto one = ctune({"train", yaml, "output_dir=" + alone.string(), "training.batch_size=2", "training.max_steps=8",
                            "checkpoint.every_n_steps=3", "--resume"});
    EXPECT_EQ(one.status, 1) << one.err;
    EXPECT_NE(one.err.find("split over 2 ranks; resume it with as many, found 1"), std::string::npos) << one.err;
  }
}

// RLOO on 2 ranks computes what one process does: each completion's KL penalty (its kept
// log-probabilities against the reference's, on the rank that sampled it) is summed over the
// ranks into the whole batch's rewards before the advantages, which normalize_advantages
// standardises over the whole batch (a group's baselines alone stay on its rank), so the
// advantages, hence the losses, are one process's.
TEST_F(Distributed, RlooRanksFollowOneProcess) {
  const std::string yaml = (kDir / "rloo.yaml").string();
  write(yaml, prompt_recipe("full", kDir / "rloo-prompts.jsonl", 8,
                            "objective: {name: rloo, num_generations: 4, max_new_tokens: 5, beta: 0.5, normalize_advantages: true}\n"));
  auto rewards = [](const fs::path& run) { return step_figures(run, {"reward", "completions/mean_length"}); };
  auto last_kl = [](const fs::path& run) {
    double kl = 0;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line);
      if (j.contains("kl")) kl = j["kl"].get<double>();
    }
    return kl;
  };
  const fs::path one = kDir / "rloo-one", two = kDir / "rloo-two";
  const auto single = ctune({"train", yaml, "output_dir=" + one.string(), "training.batch_size=2", "training.max_steps=4", "optimizer.lr=0.01"});
  ASSERT_EQ(single.status, 0) << single.err;
  const auto ranks = ctune({"train", yaml, "output_dir=" + two.string(), "--nproc", "2", "training.batch_size=1", "training.max_steps=4",
                            "optimizer.lr=0.01"});
  ASSERT_EQ(ranks.status, 0) << ranks.err;
  ASSERT_EQ(rewards(one).size(), 4u);
  EXPECT_EQ(rewards(two), rewards(one)) << "the same completions and rewards";
  EXPECT_TRUE(within("rloo x2 loss trajectory vs one process", max_difference(trajectory(two), trajectory(one)), kSameNumbers));
  EXPECT_TRUE(within("rloo x2 gradient norms vs one process", max_difference(grad_norms(two), grad_norms(one)), kSameNumbers));
  EXPECT_GT(std::abs(last_kl(one)), 1e-3) << "the penalty has something to move";
}

// KTO on 2 ranks (docs/objectives.md#kto): each rank's reference point z is its own block of
// records' (TRL averages the devices'), so 2 ranks of 2 records with accumulation 2 compute what
// one process computes with accumulation 4: the same blocks of neighbours in the file's order,
// the same z each, the same losses, rewards and gradients; under full_shard as well.
TEST_F(Distributed, KtoRanksFollowOneProcessWithAccumulation) {
  std::string records;
  for (int i = 0; i < 40; ++i)
    records += R"({"prompt": "Add )" + std::to_string(i) + R"( and 3 = ", "completion": ")" + std::to_string(i % 3 ? i + 3 : i + 5) +
               R"(", "label": )" + (i % 3 ? "true" : "false") + "}\n";
  write(kDir / "unpaired.jsonl", records);
  std::string text = recipe("lora");
  const auto data = text.find("data: {"), end = text.find("}\n", data);
  text.replace(data, end + 2 - data, "data: {train: " + (kDir / "unpaired.jsonl").string() +
                                         ", format: unpaired_preference, chat_format: plain, max_seq_len: 64, shuffle: false}\n");
  text.replace(text.find(", eval_every: 4"), std::string(", eval_every: 4").size(), "");
  const std::string yaml = (kDir / "kto.yaml").string();
  write(yaml, text + "objective: {name: kto, beta: 0.5}\n");
  auto rewards = [](const fs::path& run) { return step_figures(run, {"rewards/chosen", "kl"}); };
  const fs::path one = kDir / "kto-one";
  const auto single = ctune({"train", yaml, "output_dir=" + one.string(), "training.max_steps=4", "training.grad_accum=4"});
  ASSERT_EQ(single.status, 0) << single.err;
  ASSERT_EQ(trajectory(one).size(), 4u);
  for (const std::string strategy : {"no_shard", "full_shard"}) {
    const fs::path two = kDir / ("kto-two-" + strategy);
    const auto ranks = ctune({"train", yaml, "output_dir=" + two.string(), "--nproc", "2", "training.max_steps=4", "distributed.strategy=" + strategy});
    ASSERT_EQ(ranks.status, 0) << ranks.err;
    EXPECT_TRUE(within("kto x2 " + strategy + " loss trajectory vs one process", max_difference(trajectory(two), trajectory(one)), kSameNumbers));
    EXPECT_TRUE(within("kto x2 " + strategy + " gradient norms vs one process", max_difference(grad_norms(two), grad_norms(one)), kSameNumbers));
    EXPECT_EQ(rewards(two).size(), 4u);
  }
}

// On-policy distillation on 2 ranks computes what one process does, under no_shard and
// full_shard (whose student is gathered whole for its generation): every micro-batch on-policy
// (lmbda 1), each row's completion drawn from the stream of its row in the global batch, the
// divergence summed over the step's completion tokens on every rank. The teacher (another random
// model of the same tokenizer) is whole on each rank.
TEST_F(Distributed, DistillRanksFollowOneProcess) {
  const fs::path teacher = kDir / "teacher";
  ASSERT_EQ(ctune({"init", "--config", (kDir / "config.json").string(), "--out", teacher.string(), "--tokenizer", "byte", "--seed", "9"}).status, 0);
  const std::string yaml = (kDir / "distill.yaml").string();
  write(yaml, recipe("full") + "objective: {name: distill, teacher: {path: " + teacher.string() + "}, lmbda: 1, max_new_tokens: 5}\n");
  auto lengths = [](const fs::path& run) { return step_figures(run, {"completions/mean_length"}); };
  const fs::path one = kDir / "distill-one";
  const auto single = ctune({"train", yaml, "output_dir=" + one.string(), "training.max_steps=4"});
  ASSERT_EQ(single.status, 0) << single.err;
  ASSERT_EQ(trajectory(one).size(), 4u + 1u);
  for (const std::string strategy : {"no_shard", "full_shard"}) {
    const fs::path two = kDir / ("distill-two-" + strategy);
    const auto ranks = ctune({"train", yaml, "output_dir=" + two.string(), "--nproc", "2", "training.batch_size=1", "training.max_steps=4",
                              "distributed.strategy=" + strategy});
    ASSERT_EQ(ranks.status, 0) << ranks.err;
    EXPECT_EQ(lengths(two).size(), 4u);
    EXPECT_TRUE(within("distill x2 " + strategy + " loss trajectory vs one process", max_difference(trajectory(two), trajectory(one)), kSameNumbers));
    EXPECT_TRUE(within("distill x2 " + strategy + " gradient norms vs one process", max_difference(grad_norms(two), grad_norms(one)), kSameNumbers));
  }
}

TEST_F(Distributed, HybridShardOnTwoSimulatedNodesComputesWhatFullShardDoes) {
  // 4 ranks as 2 nodes of 2 (LOCAL_WORLD_SIZE=2, started by hand as torchrun would): each node
  // shards the parameters over its 2 ranks, the nodes hold the same shards, and each reduced
  // gradient shard is summed over the nodes. With CPU offload on (shards and optimizer state in
  // the host pool; on a CPU build the same memory) and prefetch. The numbers are full_shard's
  // on 4 ranks.
  const std::string yaml = (kDir / "full.yaml").string();
  const fs::path reference = kDir / "hybrid-reference", run = kDir / "hybrid";
  const auto full = ctune({"train", yaml, "output_dir=" + reference.string(), "--nproc", "4", "distributed.strategy=full_shard"});
  ASSERT_EQ(full.status, 0) << full.err;
  const std::string port = "MASTER_PORT=" + std::to_string(free_port());
  std::vector<std::vector<std::string>> envs;
  for (int r = 0; r < 4; ++r) {
    envs.push_back({"RANK=" + std::to_string(r), "WORLD_SIZE=4", "LOCAL_RANK=" + std::to_string(r % 2), "LOCAL_WORLD_SIZE=2",
                    "MASTER_ADDR=127.0.0.1", port});
  }
  const auto runs = ctune_together(envs, {"train", yaml, "output_dir=" + run.string(), "distributed.strategy=hybrid_shard",
                                          "distributed.cpu_offload=true", "distributed.prefetch=true"});
  for (const auto& r : runs) ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(runs[0].err.find("ranks        4 (2 nodes, hybrid_shard with CPU offload over gloo"), std::string::npos) << runs[0].err;
  EXPECT_TRUE(within("hybrid_shard 2 nodes x 2: loss trajectory vs full_shard x4", max_difference(trajectory(run), trajectory(reference)),
                     kSameNumbers));
}

TEST_F(Distributed, ShardedStateWrittenByFourRanksResumesOnTwoAndOnOne) {
  // Parameters and optimizer state sharded over 4 ranks (full_shard, batch 1 each), killed inside step 5, resumed from
  // step 4's checkpoint in one process (batch 4) and on 2 ranks (batch 2 each): the same global
  // batch. Checkpoints hold the state as one process names it, so each resumed rank takes its
  // part of it and the run continues the 4-rank trajectory.
  const std::string yaml = (kDir / "full.yaml").string();
  const std::vector<std::string> sharded = {"distributed.strategy=full_shard", "checkpoint.every_n_steps=4"};
  const fs::path reference = kDir / "reshard-reference", run = kDir / "reshard";
  std::vector<std::string> args = {"train", yaml, "output_dir=" + reference.string(), "--nproc", "4", "training.batch_size=1"};
  args.insert(args.end(), sharded.begin(), sharded.end());
  ASSERT_EQ(ctune(args).status, 0);
  args[2] = "output_dir=" + run.string();
  ::setenv("CTUNE_KILL_AT", "step:5:mid@2", 1);
  EXPECT_EQ(ctune(args).status, 137);
  ::unsetenv("CTUNE_KILL_AT");
  // A copy of the interrupted run resumes in one process (batch 4) as well.
  const fs::path alone = kDir / "reshard-alone";
  fs::copy(run, alone, fs::copy_options::recursive);
  const auto one = ctune({"train", yaml, "output_dir=" + alone.string(), "training.batch_size=4", "--resume"});
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_TRUE(within("4 ranks resumed in one process: loss trajectory vs the 4-rank run",
                     max_difference(trajectory(alone), trajectory(reference)), kSameNumbers));
  args = {"train", yaml, "output_dir=" + run.string(), "--nproc", "2", "training.batch_size=2", "--resume"};
  args.insert(args.end(), sharded.begin(), sharded.end());
  const auto r = ctune(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("`training.batch_size` changed from 1 to 2 on 2 ranks: the global batch stays 4 rows"), std::string::npos)
      << r.err;
  auto expected = trajectory(reference), got = trajectory(run);
  EXPECT_TRUE(within("4 ranks resumed on 2: loss trajectory vs the 4-rank run", max_difference(got, expected), kSameNumbers));
  // The same per-rank batch on another world size is another global batch: refused.
  args = {"train", yaml, "output_dir=" + run.string(), "--nproc", "2", "training.batch_size=1", "--resume"};
  const auto refused = ctune(args);
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.err.find("differs from the checkpoint"), std::string::npos) << refused.err;
}

// Every file of a directory (not below it), by name: its bytes.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().filename().string()] = ctune::testing::slurp(e.path());
  return out;
}

TEST_F(Distributed, ShardedCheckpointsConsolidateIntoTheWholeResult) {
  // full_shard over 2 ranks writes sharded checkpoints (checkpoint.layout: auto): each rank its
  // slices, no rank the whole model or state. The last one, consolidated, is byte for byte the
  // result rank 0 wrote whole from the gathered model (a Hugging Face model or a PEFT adapter).
  for (const std::string method : {"full", "lora"}) {
    const fs::path run = kDir / ("consolidate-" + method);
    const auto r = ctune({"train", (kDir / (method + ".yaml")).string(), "output_dir=" + run.string(), "--nproc", "2",
                          "distributed.strategy=full_shard"});
    ASSERT_EQ(r.status, 0) << r.err;
    const fs::path last = run / "checkpoints" / "step_00000008";
    EXPECT_TRUE(fs::exists(last / "shards" / "rank-00000-of-00002.safetensors")) << method;
    EXPECT_TRUE(fs::exists(last / "shards" / "rank-00001-of-00002.safetensors")) << method;
    EXPECT_FALSE(fs::exists(last / "optimizer.safetensors")) << method;

    // Tools that read whole weights name the way out.
    const auto refused = method == "full" ? ctune({"generate", "--model", last.string(), "--prompt", "hi"})
                                          : ctune({"merge", "--base", (kDir / "model").string(), "--adapter", last.string(), "--out",
                                                   (kDir / "never-merged").string()});
    EXPECT_EQ(refused.status, 1) << method;
    EXPECT_NE(refused.err.find("a sharded checkpoint, one file per rank: make it whole with `ctune consolidate"), std::string::npos)
        << refused.err;

    const fs::path whole = kDir / ("consolidated-" + method);
    const auto c = ctune({"consolidate", last.string(), "--out", whole.string()});
    ASSERT_EQ(c.status, 0) << c.err;
    EXPECT_NE(c.err.find("assembled from 2 shard files"), std::string::npos) << c.err;
    const auto result = files_of(run / (method == "full" ? "model" : "adapter"));
    const auto consolidated = files_of(whole);
    EXPECT_FALSE(result.empty());
    EXPECT_EQ(consolidated.size(), result.size()) << method;
    for (const auto& [name, bytes] : result) EXPECT_TRUE(consolidated.count(name) && consolidated.at(name) == bytes) << method << " " << name;
  }

  // A rank killed while writing its shard leaves no checkpoint of that step (rank 0 never writes
  // the manifest); the run resumes from the one before and continues exactly.
  const fs::path run = kDir / "shard-killed";
  const std::string yaml = (kDir / "lora.yaml").string();
  ::setenv("CTUNE_KILL_AT", "checkpoint:4:shard@1", 1);
  const auto killed = ctune({"train", yaml, "output_dir=" + run.string(), "--nproc", "2", "distributed.strategy=full_shard"});
  ::unsetenv("CTUNE_KILL_AT");
  EXPECT_EQ(killed.status, 137) << killed.err;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_00000002" / "MANIFEST.json"));
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step_00000004"));
  const auto resumed = ctune({"train", yaml, "output_dir=" + run.string(), "--nproc", "2", "distributed.strategy=full_shard", "--resume"});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from"), std::string::npos) << resumed.err;
  expect_identical(trajectory(run), trajectory(kDir / "consolidate-lora"), "resumed after a rank died writing its shard");
}

TEST_F(Distributed, RanksStartedByTorchrunOrSlurmVariablesTrain) {
  const auto reference = one_process("lora", 2);
  const fs::path torchrun = kDir / "torchrun";
  auto runs = ctune_together(torchrun_env(2), {"train", (kDir / "lora.yaml").string(), "output_dir=" + torchrun.string()});
  for (const auto& r : runs) ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(within("torchrun variables: loss trajectory vs one process", max_difference(trajectory(torchrun), reference), kSameNumbers));

  // The real torchrun (python3-torch's torch.distributed.run, static rendezvous, agent store).
  // Its defaults for -r/-t crash on Python 3.11 (torch 1.13 reads "0" as no Std value), so the
  // command names stderr redirection explicitly, as a user of that pairing must.
  const fs::path real = kDir / "real-torchrun";
  const std::string cmd = "/usr/bin/python3 -m torch.distributed.run --no_python --nproc_per_node 2 -r 2 -t 2 '" +
                          std::string(CTUNE_BINARY) + "' train '" + (kDir / "lora.yaml").string() + "' output_dir='" +
                          real.string() + "' > '" + (kDir / "torchrun.log").string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << ctune::testing::slurp(kDir / "torchrun.log");
  EXPECT_TRUE(within("torchrun: loss trajectory vs one process", max_difference(trajectory(real), reference), kSameNumbers));

  // Slurm: rank, size and node-local rank from srun; the master from the node list.
  const fs::path slurm = kDir / "slurm";
  const std::string port = "MASTER_PORT=" + std::to_string(free_port());
  std::vector<std::vector<std::string>> envs;
  for (int r = 0; r < 2; ++r) {
    envs.push_back({"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=2", "SLURM_LOCALID=" + std::to_string(r),
                    "SLURM_STEP_TASKS_PER_NODE=2(x1)", "SLURM_JOB_NODELIST=localhost", "SLURM_JOB_ID=42", port});
  }
  runs = ctune_together(envs, {"train", (kDir / "lora.yaml").string(), "output_dir=" + slurm.string()});
  for (const auto& r : runs) ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(within("Slurm variables: loss trajectory vs one process", max_difference(trajectory(slurm), reference), kSameNumbers));
}

TEST_F(Distributed, ADeadRankStopsTheOthersAndTheRunResumesExactly) {
  const std::string yaml = (kDir / "full.yaml").string();
  const fs::path reference = kDir / "dead-reference", run = kDir / "dead";
  // full_shard: every forward and backward is full of collectives (gathers, per-parameter
  // reduce-scatters inside autograd), so a failure surfaces wherever rank 0 happens to be.
  const std::string strategy = "distributed.strategy=full_shard";
  ASSERT_EQ(ctune({"train", yaml, "output_dir=" + reference.string(), "--nproc", "2", strategy}).status, 0);

  // Rank 1 is killed inside step 5; rank 0 must notice, name it and exit non-zero in time.
  const auto start = std::chrono::steady_clock::now();
  const auto runs =
      ctune_together(torchrun_env(2, {"CTUNE_KILL_AT=step:5:mid@1"}), {"train", yaml, "output_dir=" + run.string(), strategy});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(runs[1].status, 137);
  EXPECT_EQ(runs[0].status, 1) << runs[0].err;
  EXPECT_NE(runs[0].err.find("rank 1 died or stopped answering"), std::string::npos) << runs[0].err;
  EXPECT_TRUE(within("seconds until rank 0 exits after rank 1 died (distributed.timeout_s)", seconds, 30));

  // Resumed from step 4's checkpoint (by the launcher this time): the trajectory of the run
  // that never failed, bit for bit.
  const auto r = ctune({"train", yaml, "output_dir=" + run.string(), "--nproc", "2", "--resume", strategy});
  ASSERT_EQ(r.status, 0) << r.err;
  expect_identical(trajectory(run), trajectory(reference), "resumed after a dead rank");

  // The launcher stops the survivors when a rank dies, exits with the dead rank's status and
  // says in one line how it died (a killed rank says nothing itself).
  const fs::path launched = kDir / "dead-launched";
  ::setenv("CTUNE_KILL_AT", "step:3:mid@1", 1);
  const auto l = ctune({"train", yaml, "output_dir=" + launched.string(), "--nproc", "2"});
  ::unsetenv("CTUNE_KILL_AT");
  EXPECT_EQ(l.status, 137) << l.err;
  EXPECT_NE(l.err.find("\nctune: rank 1 was killed by signal 9 (Killed); stopping the other ranks\n"), std::string::npos) << l.err;
  EXPECT_EQ(l.err.find("\nctune: rank 0 "), std::string::npos) << "one line, for the rank that died first: " << l.err;
}

TEST_F(Distributed, AFrozenRankFailsTheRunWithinTheTimeout) {
  // Rank 1 freezes (SIGSTOP) after step 3: it holds its connections open but never answers.
  const fs::path run = kDir / "frozen";
  ::setenv("CTUNE_KILL_AT", "step:3:after@1=STOP", 1);
  const auto start = std::chrono::steady_clock::now();
  const auto r = ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + run.string(), "--nproc", "2",
                        "distributed.timeout_s=8"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::unsetenv("CTUNE_KILL_AT");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("[rank 0] ctune: distributed error: rank 0: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 died or stopped answering"), std::string::npos) << r.err;
  // What this bounds is "never a hang": the 8 s timeout, the launcher's 5 s grace before it
  // kills the frozen rank, and start-up (two ranks building the model: 3 s on a quiet machine,
  // allowed 45 s on one shared with a parallel test run).
  EXPECT_TRUE(within("seconds until a run with a frozen rank ends (timeout 8 + grace 5 + start-up)", seconds, 8 + 5 + 45));
}

TEST_F(Distributed, SigtermStopsEveryRankAfterTheSameStepWithACheckpoint) {
  const std::string yaml = (kDir / "lora.yaml").string();
  const fs::path reference = kDir / "term-reference", run = kDir / "term";
  ASSERT_EQ(ctune({"train", yaml, "output_dir=" + reference.string(), "--nproc", "2"}).status, 0);
  // Only rank 1 receives the signal (a scheduler may signal ranks at different moments).
  ::setenv("CTUNE_KILL_AT", "step:5:after@1=TERM", 1);
  const auto r = ctune({"train", yaml, "output_dir=" + run.string(), "--nproc", "2"});
  ::unsetenv("CTUNE_KILL_AT");
  EXPECT_EQ(r.status, 143) << r.err;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_00000005" / "MANIFEST.json")) << r.err;
  const auto resumed = ctune({"train", yaml, "output_dir=" + run.string(), "--nproc", "2", "--resume"});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  expect_identical(trajectory(run), trajectory(reference), "resumed after SIGTERM");
}

TEST_F(Distributed, WrongLaunchesAreRefusedWithOneLine) {
  // --nproc against a world the environment already describes.
  auto runs = ctune_together({{"RANK=0", "WORLD_SIZE=1"}}, {"train", (kDir / "lora.yaml").string(), "--nproc", "2",
                                                           "output_dir=" + (kDir / "wrong").string()});
  ctune::testing::expect_one_line_failure(runs[0], "--nproc 2 disagrees with the world of 1 ranks", "--nproc vs WORLD_SIZE");
  runs = ctune_together({{"RANK=3", "WORLD_SIZE=2"}}, {"train", (kDir / "lora.yaml").string()});
  ctune::testing::expect_one_line_failure(runs[0], "rank 3 is outside the world of 2 ranks", "RANK >= WORLD_SIZE");
  runs = ctune_together({{"RANK=0", "WORLD_SIZE=two"}}, {"train", (kDir / "lora.yaml").string()});
  ctune::testing::expect_one_line_failure(runs[0], "WORLD_SIZE: expected an integer", "WORLD_SIZE text");
  const auto v = ctune({"validate", (kDir / "lora.yaml").string(), "output_dir=" + (kDir / "wrong").string(), "distributed.backend=nccl"});
  ctune::testing::expect_one_line_failure(v, "distributed.backend", "nccl on a CPU build");
  const auto offload = ctune({"validate", (kDir / "lora.yaml").string(), "output_dir=" + (kDir / "wrong").string(),
                              "distributed.cpu_offload=true", "distributed.strategy=shard_grad_op"});
  ctune::testing::expect_one_line_failure(offload, "distributed.cpu_offload", "offload without parameter shards");
  const auto unknown = ctune({"validate", (kDir / "lora.yaml").string(), "output_dir=" + (kDir / "wrong").string(),
                              "distributed.strategy=zero3"});
  ctune::testing::expect_one_line_failure(unknown, "distributed.strategy", "unknown strategy");
}

// The processes (launcher and ranks) whose command line holds `needle`.
std::vector<int> pids_with(const std::string& needle) {
  std::vector<int> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos || std::stoi(name) == ::getpid()) continue;
    std::string cmdline = ctune::testing::slurp(e.path() / "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.find(needle) != std::string::npos && cmdline.find("ctune") != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

// One variable of a process's environment ("" when unset or gone).
std::string env_of(int pid, const std::string& name) {
  const std::string env = ctune::testing::slurp("/proc/" + std::to_string(pid) + "/environ");
  for (std::size_t pos = 0, end; pos < env.size(); pos = end + 1) {
    end = env.find('\0', pos);
    if (end == std::string::npos) end = env.size();
    if (env.compare(pos, name.size() + 1, name + "=") == 0) return env.substr(pos + name.size() + 1, end - pos - name.size() - 1);
  }
  return "";
}

// The TCP sockets `pids` listen on, as /proc/net/tcp{,6} spell their local addresses (hex).
std::vector<std::string> listening(const std::vector<int>& pids) {
  std::set<std::string> inodes;
  for (int pid : pids) {
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      const std::string target = fs::read_symlink(fd.path(), ec).string();
      if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode)) out.push_back(local);
    }
  }
  return out;
}

// A rank-sized run, long enough (200 steps) to be attacked or stopped while it trains.
std::vector<std::string> long_run(const fs::path& out) {
  return {"train", (kDir / "lora.yaml").string(), "output_dir=" + out.string(), "--nproc", "2", "training.max_steps=200",
          "training.eval_every=100", "checkpoint.every_n_steps=0"};
}

TEST_F(Distributed, TheLaunchersStoreIsPrivateAndAStrangerChangesNothing) {
  const fs::path reference = kDir / "store-reference", run = kDir / "store-attacked";
  ASSERT_EQ(ctune(long_run(reference)).status, 0);

  ctune::testing::Run attacked;
  std::thread training([&] { attacked = ctune(long_run(run)); });
  // The ranks' environment names the store's socket (and its secret, which a stranger lacks).
  std::string socket;
  std::vector<int> pids;
  for (int i = 0; i < 3000 && socket.empty(); ++i) {
    pids = pids_with("output_dir=" + run.string());
    for (int pid : pids)
      if (socket.empty()) socket = env_of(pid, "CTUNE_STORE_SOCKET");
    if (socket.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(socket.empty()) << "no rank of the run was seen";
  // The store is a socket in a directory of this user's only; no TCP port of the run listens
  // beyond loopback (Gloo's own listeners, while ranks connect, are on 127.0.0.1).
  struct stat st {};
  ASSERT_EQ(::stat(fs::path(socket).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& local : listening(pids)) {
    const bool loopback = local.rfind("0100007F:", 0) == 0 || local.rfind("00000000000000000000000001000000:", 0) == 0;
    EXPECT_TRUE(loopback) << "a rank listens on " << local;
  }
  // A stranger: a wrong secret, then "failed" set without any, then a 4 GB frame header.
  write(kDir / "stranger.py", R"(import socket, struct, sys
def frame(body): return struct.pack('<I', len(body)) + body
def text(b): return struct.pack('<I', len(b)) + b
answers = []
for message in [frame(b'\x01' + text(b'0' * 64)) + frame(b'\x02' + text(b'ctune/0//failed') + text(b'1')),
                frame(b'\x02' + text(b'ctune/0//failed') + text(b'1')), struct.pack('<I', 0xffffffff)]:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.sendall(message)
    answers.append(s.recv(16))
sys.exit(0 if answers == [b'', b'', b''] else 1)
)");
  const int stranger = std::system(("/usr/bin/python3 " + (kDir / "stranger.py").string() + " " + socket).c_str());
  training.join();
  EXPECT_EQ(stranger, 0) << "each stranger's connection is closed without an answer (and the run was still training)";
  ASSERT_EQ(attacked.status, 0) << attacked.err;
  EXPECT_NE(attacked.err.find("ctune: the run's store refused a connection from pid"), std::string::npos) << attacked.err;
  EXPECT_NE(attacked.err.find("wrong secret"), std::string::npos) << attacked.err;
  expect_identical(trajectory(run), trajectory(reference), "a run whose store a stranger tried to write");
  EXPECT_FALSE(fs::exists(socket)) << "the launcher removes its socket";
}

// torchrun's agent hosts a TCP store any host may reach: a stranger's "failed" key there is
// ignored when it is no rank's (and reported), and unreachable when the run has a secret.
TEST_F(Distributed, AStrangersKeysOnATorchrunStoreAreHarmless) {
  write(kDir / "agent.py", R"(import sys, time, os
from datetime import timedelta
import torch.distributed as dist
port, key, value, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
try:  # torch >= 2.4 serves through libuv by default, which Debian's build lacks; 1.13 has no such argument
    store = dist.TCPStore("127.0.0.1", port, None, True, timedelta(seconds=60), wait_for_workers=False, use_libuv=False)
except TypeError:
    store = dist.TCPStore("127.0.0.1", port, None, True, timedelta(seconds=60), wait_for_workers=False)
store.set(key, value)
open(ready, "w").close()
for _ in range(1200):
    if os.path.exists(ready + ".stop"): break
    time.sleep(0.1)
)");
  for (const bool secret : {false, true}) {
    const std::string port = std::to_string(free_port());
    const fs::path ready = kDir / ("agent-ready-" + std::to_string(secret));
    const std::string key = "ctune/0//failed", value = secret ? "1" : "evil";
    std::system(("/usr/bin/python3 " + (kDir / "agent.py").string() + " " + port + " " + key + " " + value + " " + ready.string() + " &").c_str());
    for (int i = 0; i < 600 && !fs::exists(ready); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(fs::exists(ready)) << "the stand-in agent store did not start";
    std::vector<std::vector<std::string>> envs;
    for (int r = 0; r < 2; ++r) {
      envs.push_back({"RANK=" + std::to_string(r), "WORLD_SIZE=2", "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=2",
                      "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "TORCHELASTIC_USE_AGENT_STORE=True"});
      if (secret) envs.back().push_back("CTUNE_RUN_SECRET=a-secret-every-rank-of-the-job-shares");
    }
    const fs::path run = kDir / ("agent-run-" + std::to_string(secret));
    const auto runs = ctune_together(envs, {"train", (kDir / "lora.yaml").string(), "output_dir=" + run.string()});
    write(ready.string() + ".stop", "");
    ASSERT_EQ(runs[0].status, 0) << runs[0].err;
    ASSERT_EQ(runs[1].status, 0) << runs[1].err;
    const bool reported = runs[0].err.find("holds 4 bytes that no rank of this run wrote; ignored") != std::string::npos;
    EXPECT_EQ(reported, !secret) << runs[0].err;
    EXPECT_EQ(runs[0].err.find("CTUNE_RUN_SECRET is not set") != std::string::npos, !secret) << runs[0].err;
    EXPECT_TRUE(within(secret ? "ranks with CTUNE_RUN_SECRET beside a stranger's key: loss trajectory vs one process"
                              : "ranks beside a stranger's key: loss trajectory vs one process",
                       max_difference(trajectory(run), one_process("lora", 2)), kSameNumbers));
  }
}

TEST_F(Distributed, ACheckpointThatLacksARanksShardIsSkippedOnResume) {
  const std::string yaml = (kDir / "lora.yaml").string();
  const fs::path run = kDir / "missing-shard";
  const std::vector<std::string> args = {"train", yaml, "output_dir=" + run.string(), "--nproc", "2", "distributed.strategy=full_shard"};
  ASSERT_EQ(ctune(args).status, 0);
  const auto finished = trajectory(run);
  // What a store with inflated barrier counters once made rank 0 publish: a manifest without
  // rank 1's shard (and no such file).
  const fs::path last = run / "checkpoints" / "step_00000008";
  fs::remove(last / "shards" / "rank-00001-of-00002.safetensors");
  Json manifest = ctune::read_json_file(last / "MANIFEST.json");
  Json kept = Json::array();
  for (const auto& f : manifest["files"])
    if (f["file"].get<std::string>().find("rank-00001") == std::string::npos) kept.push_back(f);
  manifest["files"] = kept;
  write(last / "MANIFEST.json", manifest.dump(1));
  std::vector<std::string> resume = args;
  resume.push_back("--resume");
  const auto r = ctune(resume);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("skipping checkpoint " + last.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank-00001-of-00002.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resumed from " + (run / "checkpoints" / "step_00000006").string()), std::string::npos) << r.err;
  expect_identical(trajectory(run), finished, "resumed from the checkpoint before the damaged one");
}

TEST_F(Distributed, CtrlZOnTheLauncherSavesACheckpointAndStopsEveryRank) {
  const fs::path reference = kDir / "tstp-reference", run = kDir / "tstp";
  ASSERT_EQ(ctune(long_run(reference)).status, 0);
  std::vector<std::string> args = {CTUNE_BINARY, "--threads", "1"};
  for (const auto& a : long_run(run)) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  const std::string err_path = (kDir / "tstp.err").string();
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t launcher = -1;
  ASSERT_EQ(posix_spawn(&launcher, CTUNE_BINARY, &files, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&files);
  for (int i = 0; i < 3000 && ctune::testing::count_lines(ctune::testing::slurp(run / "metrics.jsonl")) < 20; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(launcher, SIGTSTP);  // what a terminal's Ctrl-Z sends to the foreground process
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  const std::string err = ctune::testing::slurp(err_path);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 143) << err;
  EXPECT_NE(err.find("ctune: Ctrl-Z (SIGTSTP): a run of several processes cannot be suspended"), std::string::npos) << err;
  EXPECT_NE(err.find("[rank 1] ctune: stopped: SIGTERM after step"), std::string::npos) << err;
  std::vector<std::string> resume = long_run(run);
  resume.push_back("--resume");
  const auto r = ctune(resume);
  ASSERT_EQ(r.status, 0) << r.err;
  expect_identical(trajectory(run), trajectory(reference), "resumed after Ctrl-Z");
}

}  // namespace
