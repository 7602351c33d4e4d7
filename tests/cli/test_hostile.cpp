// An unlucky user and an attacker against the real binary (docs/testing.md, "Hostile inputs"):
// links planted where writes stage and at the lock file, an output directory spelled to reach
// the home directory, an adapter whose merge is inf/NaN or whose r is absurd, consolidate onto
// the base its checkpoint needs, reports of default runs and of hostile metrics files, and
// files that never end (/dev/zero, a FIFO) where a regular file is meant. Each is refused with
// one line, or survived; nothing outside the command's output is ever written.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/json.h"
#include "run_ctune.h"

namespace fs = std::filesystem;

namespace {
using ctune::Json;
using ctune::testing::ctune;
using ctune::testing::expect_one_line_failure;
using ctune::testing::slurp;

const fs::path kDir = fs::path(CTUNE_TEST_DATA_DIR) / ("hostile-" + std::to_string(::getpid()));
const std::string kPrecious = "precious: must never be overwritten\n";

using ctune::testing::write;

std::string recipe(bool eval) {
  const std::string d = kDir.string();
  return "model: {path: " + d + "/model}\n"
         "data: {train: " + d + "/train.jsonl," + (eval ? " eval: " + d + "/eval.jsonl," : std::string()) +
         " format: instruct, instruct_template: chat, chat_format: plain, max_seq_len: 64}\n"
         "peft: {method: lora, rank: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj]}\n"
         "optimizer: {name: adamw, lr: 3.0e-3}\n"
         "training: {batch_size: 2, grad_accum: 1, max_steps: 4}\n"
         "checkpoint: {every_n_steps: 2, keep_last: 2}\n";
}

class Hostile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(kDir);
    ASSERT_TRUE(ctune::testing::write_tiny_model_and_data(kDir, 40, 4));
    write(kDir / "lora.yaml", recipe(true));
    write(kDir / "default.yaml", recipe(false));
    write(kDir / "victim.txt", kPrecious);
    fs::create_directories(kDir / "victim-dir");
  }
  static void TearDownTestSuite() {
    if (!std::getenv("CTUNE_KEEP_TEST_DATA")) fs::remove_all(kDir);
  }
  static void expect_victims_untouched(const std::string& context) {
    EXPECT_EQ(slurp(kDir / "victim.txt"), kPrecious) << context;
    EXPECT_TRUE(fs::is_empty(kDir / "victim-dir")) << context;
  }
};

// The pids the next processes will get, as an attacker guesses them.
std::vector<long> next_pids(int n) {
  long last = 0;
  std::ifstream("/proc/sys/kernel/ns_last_pid") >> last;
  std::vector<long> out;
  for (long p = last + 1; p <= last + n; ++p) out.push_back(p);
  return out;
}

// Links at every staging name a writer of `target` used to take (pid-named), pointing at the
// victims: the classic plant. A write that opened any of them would overwrite kPrecious.
void plant_links(const fs::path& target) {
  for (long pid : next_pids(300)) {
    const std::string p = std::to_string(pid);
    std::error_code ec;
    for (const std::string& name : {".tmp-" + p, ".unchecked-" + p, ".unchecked-" + p + ".tmp-" + p})
      fs::create_symlink(kDir / "victim.txt", target.string() + name, ec);
    for (const std::string& name : {".partial-" + p, ".old-" + p, std::string(".partial-ranks")})
      fs::create_directory_symlink(kDir / "victim-dir", target.string() + name, ec);
  }
}

TEST_F(Hostile, NoWriteFollowsALinkPlantedAtAStagingNameOrTheLock) {
  // init: the model directory and its files.
  const fs::path model = kDir / "planted-init";
  plant_links(model);
  ASSERT_EQ(ctune({"init", "--config", (kDir / "config.json").string(), "--out", model.string(), "--tokenizer", "byte"}).status, 0);
  expect_victims_untouched("init");
  EXPECT_TRUE(fs::is_directory(model) && !fs::is_symlink(model));

  // train, killed in step 3, then resumed onto planted links: the checkpoint of step 4, the
  // result, metrics.jsonl cut back to the checkpoint; then merge and export of what it wrote.
  const fs::path run = kDir / "planted-run";
  ::setenv("CTUNE_KILL_AT", "step:3:mid", 1);
  EXPECT_EQ(ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + run.string()}).status, 137);
  ::unsetenv("CTUNE_KILL_AT");
  ASSERT_TRUE(fs::exists(run / "checkpoints" / "step_00000002" / "MANIFEST.json"));
  plant_links(run / "checkpoints" / "step_00000004");
  plant_links(run / "adapter");
  plant_links(run / "metrics.jsonl");
  plant_links(run / "recipe.yaml");
  const auto trained = ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + run.string(), "--resume"});
  ASSERT_EQ(trained.status, 0) << trained.err;
  expect_victims_untouched("train");
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_00000004" / "MANIFEST.json"));

  const fs::path merged = kDir / "planted-merged";
  plant_links(merged);
  ASSERT_EQ(ctune({"merge", "--base", (kDir / "model").string(), "--adapter", (run / "adapter").string(), "--out", merged.string()}).status, 0);
  expect_victims_untouched("merge");
  EXPECT_FALSE(fs::is_symlink(merged));

  const fs::path gguf = kDir / "planted.gguf";
  plant_links(gguf);
  const auto exported = ctune({"export", "--model", merged.string(), "--out", gguf.string()});
  ASSERT_EQ(exported.status, 0) << exported.err;
  expect_victims_untouched("export");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(gguf))) << "--out must be the file written, not a link";

  // The lock file: a link (or a second name of another file) is refused, its target untouched.
  const fs::path locked = kDir / "planted-lock";
  fs::create_directories(locked);
  fs::create_symlink(kDir / "victim.txt", locked / ".ctune.lock");
  expect_one_line_failure(ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + locked.string()}), "is a symbolic link",
                          "lock file planted as a link");
  fs::remove(locked / ".ctune.lock");
  fs::create_hard_link(kDir / "victim.txt", locked / ".ctune.lock");
  expect_one_line_failure(ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + locked.string()}), "not a plain file of its own",
                          "lock file planted as a hard link");
  expect_victims_untouched("lock");
}

TEST_F(Hostile, AnOutputDirThatResolvesToHomeIsRefusedBeforeAnythingIsCreated) {
  const fs::path home = kDir / "home";
  fs::create_directories(home);
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_home ? old_home : "";
  ::setenv("HOME", home.c_str(), 1);
  for (const std::string& spelled : {home.string() + "/y/..", home.string() + "/", home.string() + "/./y/../"}) {
    expect_one_line_failure(ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + spelled}), "refusing to write into the home directory",
                            spelled);
  }
  ::setenv("HOME", saved.c_str(), 1);
  EXPECT_TRUE(fs::is_empty(home)) << "nothing may be created before the check (no y/, no .ctune.lock)";
}

TEST_F(Hostile, MergeAndExportRefuseNonFiniteWeightsAndAbsurdAdapters) {
  const fs::path run = kDir / "adapter-run";
  ASSERT_EQ(ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + run.string()}).status, 0);
  auto adapter_with = [&](const std::string& name, const std::string& key, const Json& value) {
    const fs::path dir = kDir / name;
    fs::copy(run / "adapter", dir, fs::copy_options::recursive);
    Json config = ctune::read_json_file(dir / "adapter_config.json");
    config[key] = value;
    write(dir / "adapter_config.json", config.dump(1));
    return dir.string();
  };
  // lora_alpha 1e308: scale 2.5e307, every merged q/v weight inf or NaN.
  const std::string huge = adapter_with("alpha-huge", "lora_alpha", 1e308);
  const fs::path out = kDir / "merged-nan";
  expect_one_line_failure(ctune({"merge", "--base", (kDir / "model").string(), "--adapter", huge, "--out", out.string()}),
                          "self_attn.q_proj.weight holds non-finite values after merging", "merge with alpha 1e308");
  EXPECT_FALSE(fs::exists(out));
  expect_one_line_failure(ctune({"export", "--model", (kDir / "model").string(), "--adapter", huge, "--out", (kDir / "nan.gguf").string()}),
                          "non-finite", "export with alpha 1e308");
  EXPECT_FALSE(fs::exists(kDir / "nan.gguf"));

  // r: 10^9 is checked against the tensors before anything is allocated (256 GB otherwise).
  const std::string wide = adapter_with("rank-huge", "r", 1000000000);
  const double cpu_before = ctune::testing::children_cpu_seconds();
  expect_one_line_failure(ctune({"merge", "--base", (kDir / "model").string(), "--adapter", wide, "--out", out.string()}),
                          "says r = 1000000000", "merge with r 1e9");
  // CPU seconds, not wall time (docs/testing.md, "Time"): zero-filling 256 GB would take minutes.
  EXPECT_LT(ctune::testing::children_cpu_seconds() - cpu_before, 30.0);
  const std::string nan_alpha = adapter_with("alpha-nan", "lora_alpha", "not a number");
  EXPECT_EQ(ctune({"merge", "--base", (kDir / "model").string(), "--adapter", nan_alpha, "--out", out.string()}).status, 1);
  EXPECT_FALSE(fs::exists(out));
}

// A file cut or hostile in every way a report meets: a denormal loss (the log axis once looped
// forever below 1e-323), malformed lines among good ones, 1e999, a wrong type, a 20-digit step
// in a resume line, metrics.jsonl linked to /dev/zero. The report ends and says what it skipped.
TEST_F(Hostile, ReportsOfDefaultRunsAndHostileMetricsEnd) {
  const fs::path run = kDir / "default-run";
  const auto r = ctune({"train", (kDir / "default.yaml").string(), "output_dir=" + run.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(run / "report.html")) << "a run without data.eval (the default) gets its report";
  ASSERT_EQ(ctune({"report", run.string()}).status, 0);

  const fs::path hostile = kDir / "hostile-run";
  fs::create_directories(hostile);
  fs::copy_file(run / "recipe.yaml", hostile / "recipe.yaml");
  auto step = [](int n, const std::string& loss) {
    return "{\"step\": " + std::to_string(n) + ", \"time\": " + std::to_string(n) + ".0, \"loss\": " + loss +
           ", \"lr\": 0.001, \"grad_norm\": 1.0, \"tokens\": 10}\n";
  };
  write(hostile / "metrics.jsonl", step(1, "2.5") + step(2, "1e-320") + "{\"step\": 3, \"lo\n" + step(4, "1e999") +
                                       "{\"step\": 5, \"loss\": 1.0, \"tokens\": \"many\"}\n" + step(6, "4.9e-324") + step(7, "1.5"));
  write(hostile / "train.log", "[2026-01-01 00:00:00.000] resumed from /x at step 123456789012345678901234\n");
  const auto rep = ctune({"report", hostile.string()});
  ASSERT_EQ(rep.status, 0) << rep.err;
  const std::string page = slurp(hostile / "report.html");
  EXPECT_NE(page.find("metrics.jsonl line 3 is cut short or malformed"), std::string::npos);
  EXPECT_NE(page.find("with 2 more bad lines"), std::string::npos) << "1e999 and the string token count";
  EXPECT_NE(page.find("data-series=\"train loss\" data-points=\"4\""), std::string::npos) << "steps 1, 2, 6 and 7 are drawn";

  fs::remove(hostile / "metrics.jsonl");
  fs::create_symlink("/dev/zero", hostile / "metrics.jsonl");
  const auto zero = ctune({"report", hostile.string()});
  ASSERT_EQ(zero.status, 0) << zero.err;
  EXPECT_NE(slurp(hostile / "report.html").find("metrics.jsonl is not a regular file"), std::string::npos);
}

TEST_F(Hostile, ConsolidateNeverReplacesTheBaseItsCheckpointNeeds) {
  const fs::path run = kDir / "sharded-run";
  const auto r = ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + run.string(), "--nproc", "2",
                        "distributed.strategy=full_shard"});
  ASSERT_EQ(r.status, 0) << r.err;
  const fs::path checkpoint = run / "checkpoints" / "step_00000004";
  const std::string before = slurp(kDir / "model" / "model.safetensors");
  expect_one_line_failure(ctune({"consolidate", checkpoint.string(), "--out", (kDir / "model").string(), "--overwrite"}),
                          "holds this command's input model.path", "consolidate onto the base");
  EXPECT_EQ(slurp(kDir / "model" / "model.safetensors"), before);
  EXPECT_TRUE(fs::exists(kDir / "model" / "config.json"));
  ASSERT_EQ(ctune({"consolidate", checkpoint.string(), "--out", (kDir / "consolidated").string()}).status, 0);
}

TEST_F(Hostile, FilesThatNeverEndAndBadFlagsAreRefusedWithOneLine) {
  const fs::path fifo = kDir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string model = (kDir / "model").string();
  for (const std::string& never : {std::string("/dev/zero"), fifo.string()}) {
    expect_one_line_failure(ctune({"validate", never}), "is not a regular file", "recipe " + never);
    expect_one_line_failure(ctune({"eval", "--model", model, "--data", never}), "is not a regular file", "eval --data " + never);
    expect_one_line_failure(ctune({"generate", "--model", model, "--prompt-file", never}), "is not a regular file", "prompt file " + never);
  }
  const fs::path linked = kDir / "zero-tokenizer";
  fs::copy(kDir / "model", linked, fs::copy_options::recursive);
  fs::remove(linked / "tokenizer.json");
  fs::create_symlink("/dev/zero", linked / "tokenizer.json");
  expect_one_line_failure(ctune({"generate", "--model", linked.string(), "--prompt", "hi"}), "is not a regular file", "tokenizer.json -> /dev/zero");
  expect_one_line_failure(ctune({"tokenize", "--tokenizer", "/dev/zero", "--text", "hi"}), "is not a regular file", "a tokenizer file that never ends");

  expect_one_line_failure(ctune({"--threads", "0", "info", model}), "1..4096", "--threads 0");
  expect_one_line_failure(ctune({"generate", "--model", model, "--prompt", "hi", "--stop", ""}), "--stop", "empty stop string");
  expect_one_line_failure(ctune({"generate", "--model", model, "--prompt", "hi", "--top-p", "nan"}), "--top-p", "top-p NaN");
  const auto json = ctune({"generate", "--model", model, "--prompt", "bad \xff\xfe utf-8", "--json", "--max-new-tokens", "4"});
  ASSERT_EQ(json.status, 0) << json.err;
  const Json j = Json::parse(json.out);
  EXPECT_NE(j["prompt"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos) << "invalid bytes shown as U+FFFD";
}

// Issue 70: `ctune plan --write` renamed its recipe over anything: a FIFO, a device node (as
// root it replaced /dev/full), the recipe it read, an existing file without --overwrite. It
// now follows every writer's rules (io/run_dir.h): a regular file or nothing, never an input,
// --overwrite to replace; each refusal one line, before the plan is searched.
TEST_F(Hostile, PlanWritesARegularFileThatIsNoInputAndReplacesOnlyWithOverwrite) {
  const fs::path recipe = kDir / "lora.yaml";
  const fs::path fifo = kDir / "plan-fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path dangling = kDir / "plan-dangling";
  fs::create_symlink(kDir / "plan-gone" / "x.yaml", dangling);
  const fs::path existing = kDir / "plan-existing.yaml";
  write(existing, kPrecious);
  auto plan = [&](const fs::path& out, bool overwrite) {
    std::vector<std::string> args = {"plan", recipe.string(), "output_dir=" + (kDir / "plan-run").string(), "--budget", "64GB", "--write", out.string()};
    if (overwrite) args.push_back("--overwrite");
    return ctune(args);
  };
  expect_one_line_failure(plan(fifo, true), "--write " + fifo.string() + ": is a FIFO (expected a regular file or nothing)", "FIFO");
  EXPECT_TRUE(fs::is_fifo(fifo));
  expect_one_line_failure(plan("/dev/null", true), "--write /dev/null: is a character device (expected a regular file or nothing)", "/dev/null");
  expect_one_line_failure(plan(kDir / "victim-dir", true), "is a directory (expected a regular file or nothing)", "directory");
  expect_one_line_failure(plan(dangling, true), "is a symbolic link to " + (kDir / "plan-gone" / "x.yaml").string() + ", which does not exist",
                          "dangling link");
  EXPECT_FALSE(fs::exists(kDir / "plan-gone"));
  const std::string recipe_before = slurp(recipe);
  expect_one_line_failure(plan(recipe, true), "is this command's input RECIPE", "the recipe itself");
  EXPECT_EQ(slurp(recipe), recipe_before);
  expect_one_line_failure(plan(kDir / "model" / "config.json", true), "is inside this command's input model.path", "a file of the model");
  expect_one_line_failure(plan(existing, false), "--write " + existing.string() + ": exists (pass --overwrite to replace it)", "existing");
  EXPECT_EQ(slurp(existing), kPrecious);
  const auto replaced = plan(existing, true);
  ASSERT_EQ(replaced.status, 0) << replaced.err;
  EXPECT_NE(slurp(existing).find("output_dir"), std::string::npos) << "the resolved recipe replaced the file";
  expect_victims_untouched("plan --write");
}

// A dangling link as output_dir failed with a bare "File exists" from create_directories.
TEST_F(Hostile, ADanglingLinkAsOutputDirIsRefusedWithOneLine) {
  const fs::path link = kDir / "run-link";
  fs::create_symlink(kDir / "run-gone", link);
  expect_one_line_failure(ctune({"train", (kDir / "lora.yaml").string(), "output_dir=" + link.string()}),
                          "output_dir " + link.string() + ": is a symbolic link to " + (kDir / "run-gone").string() +
                              ", which does not exist (expected a directory or nothing)",
                          "dangling output_dir");
  EXPECT_FALSE(fs::exists(kDir / "run-gone"));
}

// A first line longer than a record may be (16 MiB) under data.on_error: skip: the plan skips
// and counts it, and validate's first example, which read it again, ended the command with the
// reader's error (exit 1) after printing the plan. Now it says the example was not read.
TEST_F(Hostile, ValidateSkipsAnUnreadableFirstRecordAsTheRunDoes) {
  const fs::path data = kDir / "long-first.jsonl";
  write(data, "{\"instruction\": \"" + std::string(17 << 20, 'x') + "\", \"output\": \"y\"}\n" + slurp(kDir / "train.jsonl"));
  const auto r = ctune({"validate", (kDir / "lora.yaml").string(), "output_dir=" + (kDir / "long-first").string(), "data.train=" + data.string(), "data.on_error=skip"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("1 malformed records skipped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# first example: not read ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# ok"), std::string::npos) << r.out;
  fs::remove(data);
}

// Issue 70: 16384 experts on each of 1024 layers (552 bytes) passed every check; `estimate`
// died by SIGSEGV at 5.3 GB and `init` with std::bad_alloc. Refused in one line before any
// module is built: under an address space of 4 GB, which building them would exceed.
TEST_F(Hostile, AConfigOfMillionsOfExpertsIsRefusedBeforeAnythingIsBuilt) {
  const fs::path config = kDir / "experts.json";
  write(config, R"({"model_type": "qwen3_moe", "vocab_size": 2, "hidden_size": 2, "intermediate_size": 1, "moe_intermediate_size": 1,
    "num_hidden_layers": 1024, "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 2,
    "num_experts": 16384, "num_experts_per_tok": 1, "max_position_embeddings": 64, "tie_word_embeddings": true})");
  const std::string limit = "ulimit -v 4000000";
  const std::string expected = "\"num_experts\" must be between 0 and 1024, found 16384";
  expect_one_line_failure(ctune({"init", "--config", config.string(), "--out", (kDir / "experts-model").string()}, limit), expected, "init");
  EXPECT_FALSE(fs::exists(kDir / "experts-model"));
  write(kDir / "experts.yaml", "output_dir: " + (kDir / "experts-run").string() + "\n" + recipe(true));
  expect_one_line_failure(ctune({"estimate", (kDir / "experts.yaml").string(), "model.path=" + config.string()}, limit), expected, "estimate");
  // Each bound met, their product not: 1024 experts on 1024 layers.
  std::string product = slurp(config);
  product.replace(product.find("16384"), 5, "1024");
  write(config, product);
  expect_one_line_failure(ctune({"estimate", (kDir / "experts.yaml").string(), "model.path=" + config.string()}, limit),
                          "are 1048576 expert modules, past any real model (at most 65536)", "estimate, 2^20 expert modules");
}

}  // namespace
