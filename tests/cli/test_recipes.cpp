// Recipes through the real binary: 35 bad recipes (unknown keys with suggestions, wrong types,
// ranges, missing files, LoRA targets the model lacks, tokenizer larger than the embedding,
// empty eval split, broken dataset lines, bad overrides, ...) each refused with one line naming
// the recipe and key, before any training; every shipped recipe parses; `ctune train` runs a
// full and a LoRA fine-tune end to end and leaves the documented files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/json.h"
#include "core/recipe.h"
#include "ops/cpu_features.h"
#include "margins.h"
#include "run_ctune.h"

namespace fs = std::filesystem;

namespace {
using ctune::Json;
using ctune::testing::ctune;
using ctune::testing::expect_one_line_failure;

// Per process: CTest runs every case in a process of its own, possibly in parallel.
const fs::path kDir = fs::path(CTUNE_TEST_DATA_DIR) / ("recipes-" + std::to_string(::getpid()));

using ctune::testing::write;

std::string instruct_rows(int n, int offset = 0) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    s += R"({"instruction": "Say the number )" + std::to_string(i + offset) + R"(", "output": ")" +
         std::to_string((i + offset) * 7) + "\"}\n";
  }
  return s;
}

// A valid recipe over the fixture model and data; cases edit it.
std::string base_recipe() {
  const std::string d = kDir.string();
  return "output_dir: " + d + "/run\n" +
         "model: {path: " + d + "/model}\n"
         "data:\n"
         "  train: " + d + "/train.jsonl\n"
         "  eval: " + d + "/eval.jsonl\n"
         "  format: instruct\n"
         "  instruct_template: chat\n"
         "  chat_format: plain\n"
         "  max_seq_len: 64\n"
         "peft: {method: lora, rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}\n"
         "optimizer: {name: adamw, lr: 1.0e-3}\n"
         "scheduler: {name: cosine, warmup_steps: 1}\n"
         "training: {batch_size: 4, grad_accum: 2, max_steps: 3, eval_every: 2}\n";
}

class Recipes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(kDir);
    fs::create_directories(kDir);
    write(kDir / "config.json", R"({"model_type": "llama", "vocab_size": 320, "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": true,
      "max_position_embeddings": 512, "torch_dtype": "float32"})");
    ASSERT_EQ(ctune({"init", "--config", (kDir / "config.json").string(), "--out", (kDir / "model").string(), "--tokenizer",
                     "byte"})
                  .status,
              0);
    write(kDir / "small-vocab.json", R"({"model_type": "llama", "vocab_size": 200, "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4, "torch_dtype": "float32"})");
    ASSERT_EQ(ctune({"init", "--config", (kDir / "small-vocab.json").string(), "--out", (kDir / "small-vocab").string()}).status, 0);
    write(kDir / "train.jsonl", instruct_rows(40));
    write(kDir / "eval.jsonl", instruct_rows(8, 100));
    write(kDir / "empty.jsonl", "\n\n");
    write(kDir / "broken.jsonl", instruct_rows(2) + "{\"instruction\": \"x\", \"output\": \n" + instruct_rows(2));
    write(kDir / "no-output.jsonl", R"({"instruction": "a", "answer": "b"})" "\n");
    // Teachers for objective.name distill: another random model of the same shape, the model
    // without its tokenizer, and with two tokens' ids swapped in its tokenizer.
    ASSERT_EQ(ctune({"init", "--config", (kDir / "config.json").string(), "--out", (kDir / "teacher").string(), "--tokenizer", "byte",
                     "--seed", "7"}).status, 0);
    fs::create_directories(kDir / "no-tokenizer");
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kDir / "model" / f, kDir / "no-tokenizer" / f);
    fs::copy(kDir / "model", kDir / "other-tokenizer", fs::copy_options::recursive);
    Json tokenizer = ctune::read_json_file(kDir / "other-tokenizer" / "tokenizer.json");
    std::swap(tokenizer["model"]["vocab"]["!"], tokenizer["model"]["vocab"]["\""]);
    write(kDir / "other-tokenizer" / "tokenizer.json", tokenizer.dump());
    write(kDir / "all-true.jsonl", R"({"prompt": "a", "completion": "b", "label": true})" "\n" R"({"prompt": "c", "completion": "d", "label": true})" "\n");
    write(kDir / "bad-label.jsonl", R"({"prompt": "a", "completion": "b", "label": true})" "\n" R"({"prompt": "c", "completion": "d", "label": "yes"})" "\n");
  }
  static void TearDownTestSuite() { fs::remove_all(kDir); }

  // Writes `text` as a recipe and runs `ctune validate` on it with `overrides`.
  static ctune::testing::Run validate(const std::string& name, const std::string& text,
                                      const std::vector<std::string>& overrides = {}) {
    const fs::path recipe = kDir / (name + ".yaml");
    write(recipe, text);
    std::vector<std::string> args = {"validate", recipe.string()};
    args.insert(args.end(), overrides.begin(), overrides.end());
    return ctune(args);
  }
};

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return pos == std::string::npos ? s : s.replace(pos, from.size(), to);
}

struct BadRecipe {
  std::string name;
  std::string recipe;                   // full recipe text
  std::vector<std::string> overrides;   // key=value
  std::string expect;                   // must appear in the one error line
};

TEST_F(Recipes, BadRecipesAreRefusedWithOneLine) {
  const std::string base = base_recipe();
  const std::string d = kDir.string();
  const std::vector<BadRecipe> cases = {
      {"unknown_key", base + "optimizer_x: 1\n", {}, "unknown key `optimizer_x`"},
      {"unknown_key_suggestion", replace(base, "lr: 1.0e-3", "learning_rate: 1.0e-3"), {},
       "unknown key `optimizer.learning_rate`; did you mean `optimizer.lr`?"},
      {"misplaced_key_suggestion", base + "trainer: {lr: 0.1}\n", {}, "unknown key `trainer`"},
      {"wrong_section_suggestion", replace(base, "max_steps: 3", "max_steps: 3, lr: 0.1"), {},
       "unknown key `training.lr`; did you mean `optimizer.lr`?"},
      {"wrong_type", replace(base, "batch_size: 4", "batch_size: four"), {}, "`training.batch_size` expected an integer"},
      {"out_of_range", replace(base, "batch_size: 4", "batch_size: 0"), {}, "`training.batch_size` expected an integer in [1"},
      {"negative_lr", replace(base, "lr: 1.0e-3", "lr: -0.1"), {}, "`optimizer.lr` expected a number"},
      {"bad_enum", base + "precision: fp8\n", {}, "`precision` expected one of fp32, bf16, fp16, or auto (the planner's choice: ctune plan), found \"fp8\""},
      {"missing_required", replace(base, "  train: " + d + "/train.jsonl\n", ""), {}, "`data.train` is required"},
      {"missing_train_file", replace(base, d + "/train.jsonl", d + "/nope.jsonl"), {}, "nope.jsonl"},
      {"missing_model_dir", replace(base, "path: " + d + "/model}", "path: " + d + "/no-model}"), {}, "`model.path`"},
      {"lora_target_not_allowed", replace(base, "[q_proj, v_proj]", "[qkv_proj]"), {}, "\"qkv_proj\" is not a Linear layer of this model (llama: expected q_proj"},
      {"lora_target_absent", replace(base, "[q_proj, v_proj]", "[q_proj, lm_head]"), {},
       "lm_head is tied to the input embeddings in this model"},
      {"rank_zero", replace(base, "rank: 4", "rank: 0"), {}, "`peft.rank` expected an integer in [1"},
      {"tokenizer_too_big", replace(base, "path: " + d + "/model}", "path: " + d + "/small-vocab}\ntokenizer: {path: " + d + "/model}"),
       {}, "tokenizer has 258 tokens but the model's embedding has 200 rows"},
      {"empty_eval_split", replace(base, d + "/eval.jsonl", d + "/empty.jsonl"), {}, "empty.jsonl"},
      {"broken_line", replace(base, d + "/train.jsonl", d + "/broken.jsonl"), {}, "broken.jsonl:3"},
      {"missing_column", replace(base, d + "/train.jsonl", d + "/no-output.jsonl"), {}, "no-output.jsonl:1"},
      {"both_steps_and_epochs", replace(base, "max_steps: 3", "max_steps: 3, epochs: 2"), {}, "not both"},
      {"no_steps_or_epochs", replace(base, "max_steps: 3, ", ""), {}, "set training.max_steps or training.epochs"},
      {"warmup_too_long", replace(base, "warmup_steps: 1", "warmup_steps: 3"), {}, "`scheduler.warmup_steps`"},
      {"invalid_yaml", base + "data: [unclosed\n", {}, "invalid YAML"},
      {"not_a_mapping", "- just\n- a list\n", {}, "a recipe is a YAML mapping"},
      {"section_as_scalar", replace(base, "optimizer: {name: adamw, lr: 1.0e-3}", "optimizer: adamw"), {},
       "`optimizer` is a section and expects a mapping"},
      {"betas_wrong_length", replace(base, "lr: 1.0e-3}", "lr: 1.0e-3, betas: [0.9]}"), {}, "`optimizer.betas` expected a list of 2"},
      {"betas_out_of_range", replace(base, "lr: 1.0e-3}", "lr: 1.0e-3, betas: [0.9, 1.5]}"), {}, "`optimizer.betas`"},
      {"override_unknown_key", base, {"trainin.batch_size=2"}, "did you mean `training.batch_size`?"},
      {"override_bad_value", base, {"training.grad_accum=0"}, "override `training.grad_accum=0`"},
      {"override_malformed", base, {"training.batch_size"}, "expected key.sub=value"},
      {"eval_every_without_eval", replace(base, "  eval: " + d + "/eval.jsonl\n", ""), {}, "`training.eval_every`"},
      {"eval_file_and_fraction", base, {"data.eval_fraction=0.2"}, "eval"},
      {"bad_threads", base + "threads: lots\n", {}, "`threads` expected \"auto\" or a thread count"},
      {"bad_checkpointing", base + "memory: {activation_checkpointing: every_n:0}\n", {}, "every_n:K with K >= 1"},
      {"init_adapter_missing", base + "\n", {"peft.init_from=" + d + "/no-adapter"}, "`peft.init_from`"},
      {"bad_shard_size", base, {"checkpoint.shard_size=5XB"}, "expected a positive size like 5GB"},
      {"chat_without_messages", replace(base, "format: instruct", "format: chat"), {}, "train.jsonl:1"},
      {"template_kwargs_not_a_map", base, {"data.template_kwargs=[1]"}, "`data.template_kwargs` expected a mapping"},
      {"template_kwargs_nested", base, {"data.template_kwargs={a: [1]}"}, "\"a\" is not a string, number or boolean"},
      {"chat_template_missing", replace(base, "format: instruct", "format: chat"), {"data.chat_format=template"},
       "the tokenizer has no chat_template"},
      {"quantized_full_finetune", replace(base, "method: lora", "method: none"), {"memory.quantize_base=nf4"},
       "a quantised base is frozen, so it needs LoRA"},
      {"train_router_without_experts", base, {"peft.train_router=true"}, "model_type llama has no experts, so no router to train"},
      // Objectives: a key of another objective, data the objective cannot read, ranges.
      {"objective_key_of_another", base, {"objective.beta=0.2"}, "`objective.beta`: belongs to objective.name: dpo, simpo, orpo, kto, grpo, rloo or distill; this recipe's objective is sft"},
      {"dpo_without_pairs", base, {"objective.name=dpo"}, "`data.format`: objective.name dpo learns from preference pairs: expected preference, found instruct"},
      {"pairs_without_dpo", replace(base, "format: instruct", "format: preference"), {},
       "preference pairs need a preference objective (objective.name: dpo, simpo or orpo)"},
      {"dpo_bad_loss_type", base, {"objective.name=dpo", "objective.loss_type=kto"}, "`objective.loss_type` expected one of sigmoid, ipo, hinge"},
      {"dpo_loss_type_of_grpo", base, {"objective.name=dpo", "objective.loss_type=dapo"},
       "`objective.loss_type`: objective.name dpo expects sigmoid, ipo or hinge, found dapo"},
      // grpo's loss options (docs/objectives.md#grpo): TRL's names, the former names read but not both.
      {"grpo_loss_type_of_dpo", base, {"objective.name=grpo", "objective.loss_type=sigmoid", "reward.exact={field: answer}"},
       "`objective.loss_type`: objective.name grpo expects grpo, bnpo, dr_grpo, dapo or cispo, found sigmoid"},
      {"grpo_former_and_new_name", base, {"objective.name=grpo", "objective.loss_type=grpo", "objective.aggregation=sequence", "reward.exact={field: answer}"},
       "`objective.aggregation`: is objective.loss_type's former name; set only objective.loss_type"},
      {"grpo_cispo_without_cap", base, {"objective.name=grpo", "objective.loss_type=cispo", "reward.exact={field: answer}"},
       "`objective.loss_type`: cispo caps the importance weights at objective.epsilon_high"},
      {"grpo_bad_sampling_level", base, {"objective.name=grpo", "objective.importance_sampling_level=tokens", "reward.exact={field: answer}"},
       "`objective.importance_sampling_level` expected one of token, sequence"},
      {"rloo_with_a_grpo_loss_type", base, {"objective.name=rloo", "objective.loss_type=dapo", "reward.exact={field: answer}"},
       "`objective.loss_type`: belongs to objective.name: dpo or grpo; this recipe's objective is rloo"},
      {"normalize_advantages_on_grpo", base, {"objective.name=grpo", "objective.normalize_advantages=true", "reward.exact={field: answer}"},
       "`objective.normalize_advantages`: belongs to objective.name: rloo; this recipe's objective is grpo"},
      {"dpo_smoothing_too_big", base, {"objective.name=dpo", "objective.label_smoothing=0.5"}, "`objective.label_smoothing` expected a number"},
      {"dpo_smoothing_not_sigmoid", replace(base, "format: instruct", "format: preference"),
       {"objective.name=dpo", "objective.loss_type=ipo", "objective.label_smoothing=0.1"}, "applies to objective.loss_type sigmoid, found ipo"},
      {"precompute_on_simpo", base, {"objective.name=simpo", "objective.precompute_reference=true"},
       "`objective.precompute_reference`: belongs to objective.name: dpo or kto; this recipe's objective is simpo"},
      {"reference_quantize_under_lora", replace(base, "format: instruct", "format: preference"),
       {"objective.name=dpo", "objective.reference_quantize=nf4"}, "under LoRA the reference is the base itself"},
      {"gamma_on_dpo", base, {"objective.name=dpo", "objective.gamma=1"}, "`objective.gamma`: belongs to objective.name: simpo; this recipe's objective is dpo"},
      // kto (docs/objectives.md#kto): its data, TRL's sequential order and batches of two or more, both labels.
      {"kto_without_unpaired", base, {"objective.name=kto", "data.shuffle=false"},
       "`data.format`: objective.name kto learns from labelled completions: expected unpaired_preference, found instruct"},
      {"unpaired_without_kto", replace(base, "format: instruct", "format: unpaired_preference"), {},
       "`data.format`: labelled completions need objective.name kto; this recipe's objective is sft"},
      {"kto_shuffled", base, {"objective.name=kto"}, "`data.shuffle`: objective.name kto estimates its KL baseline"},
      {"kto_batch_of_one", base, {"objective.name=kto", "data.shuffle=false", "training.batch_size=1"},
       "`training.batch_size`: objective.name kto needs at least 2 completions per batch for its KL baseline, found 1"},
      {"kto_weight_on_dpo", base, {"objective.name=dpo", "objective.desirable_weight=2"},
       "`objective.desirable_weight`: belongs to objective.name: kto; this recipe's objective is dpo"},
      {"kto_one_class", replace(base, "format: instruct", "format: unpaired_preference"),
       {"objective.name=kto", "data.shuffle=false", "data.train=" + d + "/all-true.jsonl", "data.eval=" + d + "/all-true.jsonl"},
       "all-true.jsonl: every completion's label is true (data.columns.label); objective.name kto needs both desirable and undesirable completions"},
      {"kto_bad_label", replace(base, "format: instruct", "format: unpaired_preference"),
       {"objective.name=kto", "data.shuffle=false", "data.train=" + d + "/bad-label.jsonl", "data.eval=" + d + "/bad-label.jsonl"},
       "bad-label.jsonl:2: key \"label\" expected true or false, found a string \"yes\" (data.columns.label)"},
      // distill (docs/objectives.md#distillation): a teacher with the run's tokenizer and vocabulary, beta in [0, 1].
      {"distill_without_teacher", base, {"objective.name=distill"}, "`objective.teacher.path`: objective.name distill needs a teacher"},
      {"distill_other_vocabulary", base, {"objective.name=distill", "objective.teacher.path=" + d + "/small-vocab"},
       "`objective.teacher.path`: the teacher's vocabulary has 200 rows (config.json vocab_size), the student's 320"},
      {"distill_teacher_without_tokenizer", base, {"objective.name=distill", "objective.teacher.path=" + d + "/no-tokenizer"},
       "the teacher has no tokenizer (tokenizer.json or tokenizer.model) to check against the run's"},
      {"distill_other_tokenizer", base, {"objective.name=distill", "objective.teacher.path=" + d + "/other-tokenizer"},
       "the teacher's tokenizer is not the run's (token 0 is "},
      {"distill_beta_above_one", base, {"objective.name=distill", "objective.teacher.path=" + d + "/teacher", "objective.beta=1.5"},
       "`objective.beta`: expected a number in [0, 1] for objective.name distill"},
      {"distill_packed", base, {"objective.name=distill", "objective.teacher.path=" + d + "/teacher", "data.packing=true"},
       "`data.packing`: objective.name distill scores each example on its own row"},
      {"entropy_coef_on_rloo", base, {"objective.name=rloo", "objective.entropy_coef=0.01", "reward.exact={field: answer}"},
       "`objective.entropy_coef`: belongs to objective.name: grpo; this recipe's objective is rloo"},
      {"distill_key_on_sft", base, {"objective.lmbda=0.3"}, "`objective.lmbda`: belongs to objective.name: distill; this recipe's objective is sft"},
      {"bad_truncation", base, {"data.truncation=middle"}, "`data.truncation` expected one of keep_start, keep_end, drop, error"},
      // The empty string is named, not "found a list" (an empty stop string would match before any token).
      {"empty_stop_string", base, {"objective.stop=[\"\"]"}, "`objective.stop` expected a list of strings or null, found the empty string \"\" at item 1"},
      {"moe_z_loss_negative", base, {"moe.router_z_loss_coef=-1"}, "`moe.router_z_loss_coef` expected a number"},
      {"nf4_blocksize_not_pow2", base, {"memory.quantize_base=nf4", "memory.nf4_blocksize=96"}, "power of two"},
      {"backoff_not_below_one", base, {"loss_scaling.backoff_factor=1.5"}, "`loss_scaling.backoff_factor`"},
      {"bad_int8_kernel", base, {"memory.int8_kernel=amx"}, "`memory.int8_kernel` expected one of dequantize, int8_gemm"},
      // Nesting and size attacks: refused before the YAML parser (which recurses) sees them.
      {"yaml_flow_nested_2e5", base + "seed: " + std::string(200000, '[') + std::string(200000, ']') + "\n", {},
       "flow collections nested deeper than 64 levels"},
      {"yaml_block_nested", base + "seed:\n" + [] {
         std::string s;
         for (int i = 0; i < 100; ++i) s += "- ";
         return s + "1\n";
       }(), {}, "block sequences nested deeper than 64 levels"},
      {"recipe_too_large", base + "# " + std::string(2 << 20, 'x') + "\n", {}, "more than a recipe may have"},
      // (an argument is at most 128 KiB on Linux)
      {"override_nested_1e5", base, {"seed=" + std::string(100000, '[')}, "flow collections nested deeper than 64 levels"},
  };
  ASSERT_GE(cases.size(), 25u);
  for (const auto& c : cases) {
    auto r = validate(c.name, c.recipe, c.overrides);
    expect_one_line_failure(r, c.expect, c.name);
    // Every message names where the value came from: the recipe file or the override.
    const bool located = r.err.find(c.name + ".yaml") != std::string::npos || r.err.find("override `") != std::string::npos;
    EXPECT_TRUE(located) << c.name << ": " << r.err;
    std::printf("%-28s %s", c.name.c_str(), r.err.c_str());
  }
  EXPECT_FALSE(fs::exists(kDir / "run")) << "a refused recipe must not create its output_dir";
}

TEST_F(Recipes, ValidatePrintsTheResolvedRecipe) {
  auto r = validate("valid", base_recipe(), {"optimizer.lr=5e-4"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("lr: 0.0005,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# method       LoRA r=4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# ok"), std::string::npos);
  // The resolved YAML is itself a valid recipe that resolves to the same thing.
  std::string yaml = r.out.substr(r.out.find('\n') + 1, r.out.find("# plan") - r.out.find('\n') - 1);
  while (yaml.size() > 1 && yaml[yaml.size() - 2] == '\n') yaml.pop_back();
  EXPECT_EQ(ctune::Recipe::parse(yaml, "resolved").to_yaml(), yaml);
}

TEST_F(Recipes, ShippedRecipesParse) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(CTUNE_SOURCE_DIR) / "recipes")) {
    if (e.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(ctune::Recipe::load(e.path())) << e.path();
    ++n;
  }
  EXPECT_GE(n, 6u);
}

// The documented files of a run: recipe.yaml, metrics.jsonl (keys per step and per eval),
// train.log, and the adapter or the model.
void expect_run_files(const fs::path& run, std::int64_t steps, bool lora) {
  EXPECT_TRUE(fs::exists(run / "recipe.yaml"));
  EXPECT_TRUE(fs::exists(run / "train.log"));
  std::ifstream in(run / "metrics.jsonl");
  std::int64_t step_lines = 0, eval_lines = 0, memory_lines = 0;
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line);
    if (j.contains("memory")) {  // the ledger's prediction against the measured peak, last
      ++memory_lines;
      EXPECT_GT(j["memory"]["peak_bytes"].get<std::int64_t>(), 1 << 20) << line;
      EXPECT_GT(j["memory"]["measured_peak_bytes"].get<std::int64_t>(), 1 << 20) << line;
      EXPECT_EQ(j["memory"]["lines"].size(), 10u) << line;  // ten lines on the CPU (step runtime is 0 on a GPU)
      continue;
    }
    EXPECT_EQ(memory_lines, 0) << "the memory line comes last";
    if (j.contains("eval_loss")) {
      ++eval_lines;
      continue;
    }
    ++step_lines;
    for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "peak_mem_bytes"})
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << line;
    EXPECT_EQ(j["step"].get<std::int64_t>(), step_lines);
    EXPECT_GT(j["peak_mem_bytes"].get<std::int64_t>(), 1 << 20);
  }
  EXPECT_EQ(step_lines, steps);
  EXPECT_GE(eval_lines, 1);
  EXPECT_EQ(memory_lines, 1);
  if (lora) {
    EXPECT_TRUE(fs::exists(run / "adapter" / "adapter_config.json"));
    EXPECT_TRUE(fs::exists(run / "adapter" / "adapter_model.safetensors"));
  } else {
    EXPECT_TRUE(fs::exists(run / "model" / "model.safetensors"));
    EXPECT_TRUE(fs::exists(run / "model" / "tokenizer.json"));
  }
}

// `ctune estimate` before the model is downloaded: the shipped Qwen3-30B-A3B QLoRA recipe over a
// directory holding only its config.json (recipes/models/qwen3-30b-a3b.json), no weights, no
// tokenizer, no data. The frozen bytes are those of 30.5B parameters with the projections in
// NF4 (half a byte each plus double-quantised block scales, about 3% more) and the untied
// embedding and head in bf16 (2 x 151936 x 2048 x 2 bytes = 1.24 GB): 16.2 to 17.2 GB. A run
// (validate, train) still refuses the directory.
TEST_F(Recipes, EstimateFromConfigAlone) {
  const fs::path dir = kDir / "config-only-30b";
  fs::create_directories(dir);
  fs::copy_file(fs::path(CTUNE_SOURCE_DIR) / "recipes/models/qwen3-30b-a3b.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  const std::string recipe = std::string(CTUNE_SOURCE_DIR) + "/recipes/qwen3-30b-a3b-qlora.yaml";
  const auto r = ctune({"estimate", recipe, "model.path=" + dir.string(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("no weights, so planned from config.json alone"), std::string::npos) << r.err;
  const Json j = Json::parse(r.out);
  const double frozen = j["symbol_values"]["F"].get<double>();
  EXPECT_GT(frozen, 16.2e9);
  EXPECT_LT(frozen, 17.2e9);
  EXPECT_GT(j["peak_bytes"].get<double>(), frozen);
  // The largest trainable tensor: rank 16 x q_proj's 32 x 128 outputs (o_proj's inputs).
  EXPECT_EQ(j["symbol_values"]["Nmax"].get<std::int64_t>(), 16 * 32 * 128);
  // Under full_shard a block with experts reduces its gradients together after its backward
  // (train/parallel/full_shard.h): one block's adapters whole, q/k/v/o (16 x (4096 + 2048),
  // 16 x (512 + 2048) twice, 16 x (2048 + 4096)) and 128 x 3 experts' (16 x (768 + 2048)).
  const auto sharded = ctune({"estimate", recipe, "model.path=" + dir.string(), "distributed.strategy=full_shard", "--nproc", "4", "--json"});
  ASSERT_EQ(sharded.status, 0) << sharded.err;
  const Json s = Json::parse(sharded.out);
  const std::int64_t block = 2 * 16 * (4096 + 2048) + 2 * 16 * (512 + 2048) + 128 * 3 * 16 * (768 + 2048);
  EXPECT_EQ(s["symbol_values"]["Npart"].get<std::int64_t>(), block);
  bool found = false;
  for (const auto& line : s["lines"])
    if (line["name"] == "gathered grads") {
      found = true;
      EXPECT_EQ(line["bytes"].get<std::int64_t>(), 4 * block);
    }
  EXPECT_TRUE(found) << sharded.out;
  const auto run = ctune({"validate", recipe, "model.path=" + dir.string()});
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.err.find("no model.safetensors"), std::string::npos) << run.err;
}

namespace {
// `ctune estimate` of the 0.8B LoRA recipe (LoRA on q and v) on a shipped config alone
// (recipes/models/<file>): the frozen bf16 bytes F and the dense MLP width I.
void expect_estimate_from_config(const std::string& file, std::int64_t frozen_bytes, std::int64_t intermediate) {
  const fs::path dir = kDir / ("config-only-" + file);
  fs::create_directories(dir);
  fs::copy_file(fs::path(CTUNE_SOURCE_DIR) / "recipes/models" / file, dir / "config.json", fs::copy_options::overwrite_existing);
  const std::string recipe = std::string(CTUNE_SOURCE_DIR) + "/recipes/qwen3.5-0.8b-lora.yaml";
  const auto r = ctune({"estimate", recipe, "model.path=" + dir.string(), "peft.target_modules=[q_proj,v_proj]", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["symbol_values"]["F"].get<std::int64_t>(), frozen_bytes) << file;
  EXPECT_EQ(j["symbol_values"]["I"].get<std::int64_t>(), intermediate) << file;
}
}  // namespace

// The shipped Qwen3.5-35B-A3B config (recipes/models/qwen3.5-35b-a3b.json, the multimodal
// wrapper; Qwen3_5MoeTextConfig's defaults are this model's) planned from config.json alone: the
// frozen bf16 bytes are those of every tensor transformers' Qwen3_5MoeForCausalLM has, counted
// by hand from its shapes (H 2048, V 248320, 40 layers of which 10 full attention; E 256 experts
// of 512, a shared expert of 512; DeltaNet 16 q/k heads and 32 value heads of 128, conv 4):
//   30 DeltaNet mixers x 33,718,464 + 10 attention mixers x 27,263,488
//   + 40 x (sparse block 808,978,432 + 2 norms 4,096) + embeddings and head 2 x 508,559,360 + norm 2,048
//   = 34,660,610,688 parameters (about 3.45B of them active per token). No dense MLP: I = 0.
TEST_F(Recipes, EstimateQwen35MoeFromConfigAlone) {
  expect_estimate_from_config("qwen3.5-35b-a3b.json", 2 * std::int64_t{34660610688}, 0);
}

// The shipped Qwen3-Next-80B-A3B config (recipes/models/qwen3-next-80b-a3b.json, Qwen3NextConfig's
// defaults) the same way, counted by hand from the shapes of Qwen3NextForCausalLM (H 2048,
// V 151936, 48 layers of which 12 full attention, every MLP sparse: E 512 experts of 512 and a
// shared expert of 512; the mixers as Qwen3.5-35B-A3B's, the fused in_proj_qkvz and in_proj_ba
// holding the same rows as in_proj_qkv, in_proj_z, in_proj_b and in_proj_a):
//   36 DeltaNet mixers x 33,718,464 + 12 attention mixers x 27,263,488
//   + 48 x (sparse block 1,614,809,088 + 2 norms 4,096) + embeddings and head 2 x 311,164,928 + norm 2,048
//   = 79,674,391,296 parameters. Every layer sparse: I = 0 (its intermediate_size sizes nothing).
TEST_F(Recipes, EstimateQwen3NextFromConfigAlone) {
  expect_estimate_from_config("qwen3-next-80b-a3b.json", 2 * std::int64_t{79674391296}, 0);
}

// The shipped gpt-oss-20b config (recipes/models/gpt-oss-20b.json, the release's config.json) the
// same way, counted by hand from GptOssForCausalLM's shapes (H 2880, V 201088, 24 layers, 64
// query and 8 KV heads of 64, E 32 experts of 2880):
//   24 x (attention 26,550,144: q 11,800,576 + k, v 1,475,072 each + o 11,799,360 + sinks 64;
//         sparse block 796,631,072: router 92,192 + gate_up_proj 530,841,600 + its bias 184,320
//         + down_proj 265,420,800 + its bias 92,160; 2 norms 5,760)
//   + embeddings and head 2 x 579,133,440 + norm 2,880 = 20,914,757,184 parameters, dense (the
//   release's MXFP4 experts are dequantised at load). Every layer sparse: I = 0.
TEST_F(Recipes, EstimateGptOss20bFromConfigAlone) {
  expect_estimate_from_config("gpt-oss-20b.json", 2 * std::int64_t{20914757184}, 0);
}

// objective.name distill through the binary (docs/objectives.md#distillation). A student
// distilled from a copy of itself, every micro-batch on-policy (lmbda 1: its own samples): the
// loss is 0 up to float32 rounding of the divergence's sum (below 1e-6 per token, as the
// reference test measures it: tests/train/test_distill.cpp) and so is the gradient (below 1e-5;
// towards another teacher it is above 1e-3). From another model the loss is positive and falls.
// `estimate` counts the teacher's weights as stored: this fp32 model's, the same bytes as the
// student's.
TEST_F(Recipes, DistillFromItselfIsZeroAndFromAnotherTeacherFalls) {
  const fs::path recipe = kDir / "distill.yaml";
  write(recipe, base_recipe() + "objective: {name: distill, max_new_tokens: 4}\n");
  auto steps_of = [](const fs::path& run) {
    std::vector<Json> out;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (const Json j = Json::parse(line); j.contains("loss") && j.contains("grad_norm")) out.push_back(j);
    return out;
  };
  auto self = ctune({"train", recipe.string(), "output_dir=" + (kDir / "distill-self").string(), "peft.method=none",
                     "objective.teacher.path=" + (kDir / "model").string(), "objective.lmbda=1"});
  ASSERT_EQ(self.status, 0) << self.err;
  const auto self_steps = steps_of(kDir / "distill-self");
  ASSERT_EQ(self_steps.size(), 3u);
  for (const auto& j : self_steps) {
    EXPECT_TRUE(ctune::test::within("|loss| distilled from itself", std::abs(j["loss"].get<double>()), 1e-6));
    EXPECT_TRUE(ctune::test::within("gradient norm distilled from itself", j["grad_norm"].get<double>(), 1e-5));
    EXPECT_EQ(j["on_policy"].get<double>(), 1.0);
    EXPECT_GT(j["completions/mean_length"].get<double>(), 0.0);
  }
  auto other = ctune({"train", recipe.string(), "output_dir=" + (kDir / "distill-other").string(), "peft.method=none",
                      "objective.teacher.path=" + (kDir / "teacher").string(), "objective.lmbda=0", "training.max_steps=6", "optimizer.lr=1e-2"});
  ASSERT_EQ(other.status, 0) << other.err;
  const auto other_steps = steps_of(kDir / "distill-other");
  ASSERT_EQ(other_steps.size(), 6u);
  EXPECT_TRUE(ctune::test::beyond("grad_norm towards another teacher", other_steps.front()["grad_norm"].get<double>(), 1e-3));
  EXPECT_LT(other_steps.back()["loss"].get<double>(), other_steps.front()["loss"].get<double>());

  auto estimate = ctune({"estimate", recipe.string(), "peft.method=none", "objective.teacher.path=" + (kDir / "teacher").string(), "--json"});
  ASSERT_EQ(estimate.status, 0) << estimate.err;
  std::map<std::string, std::int64_t> lines;
  const Json ledger = Json::parse(estimate.out);
  for (const auto& l : ledger["lines"]) lines[l["name"].get<std::string>()] = l["bytes"].get<std::int64_t>();
  ASSERT_EQ(lines.count("teacher"), 1u) << estimate.out;
  EXPECT_EQ(lines.at("teacher"), lines.at("weights"));
}

// `ctune estimate`: the ledger's lines with their formulas, and a peak that is at least their
// persistent part; what each technique moves, moves the line it should.
// A preference objective's ledger: two rows per pair, and under full fine-tuning the frozen
// reference's weights (as stored, or quantised with objective.reference_quantize; none with
// precomputed log-probabilities, nor under LoRA, where the reference is the base with its
// adapters off).
TEST_F(Recipes, EstimateCountsTheDpoReference) {
  std::string pairs;
  for (int i = 0; i < 8; ++i) pairs += R"({"prompt": "Add )" + std::to_string(i) + R"( and 1 = ", "chosen": ")" + std::to_string(i + 1) + R"(", "rejected": "x"})" "\n";
  write(kDir / "pairs.jsonl", pairs);
  std::string text = replace(base_recipe(), kDir.string() + "/train.jsonl", (kDir / "pairs.jsonl").string());
  text = replace(text, kDir.string() + "/eval.jsonl", (kDir / "pairs.jsonl").string());
  write(kDir / "dpo-estimate.yaml", replace(text, "format: instruct", "format: preference") + "objective: {name: dpo}\n");
  write(kDir / "sft-estimate.yaml", base_recipe());
  auto ledger = [&](const std::string& recipe, const std::vector<std::string>& overrides) {
    std::vector<std::string> args = {"estimate", (kDir / recipe).string(), "--json"};
    args.insert(args.end(), overrides.begin(), overrides.end());
    auto r = ctune(args);
    EXPECT_EQ(r.status, 0) << r.err;
    std::map<std::string, std::int64_t> lines;
    const Json j = Json::parse(r.out);
    EXPECT_TRUE(j.contains("lines")) << r.out;
    for (const auto& l : j["lines"]) lines[l["name"].get<std::string>()] = l["bytes"].get<std::int64_t>();
    for (const char* sym : {"B", "T"}) lines[std::string("symbol ") + sym] = j["symbol_values"][sym].get<std::int64_t>();
    return lines;
  };
  const auto lora = ledger("dpo-estimate.yaml", {});
  const auto full = ledger("dpo-estimate.yaml", {"peft.method=none"});
  const auto int8 = ledger("dpo-estimate.yaml", {"peft.method=none", "objective.reference_quantize=int8"});
  const auto pre = ledger("dpo-estimate.yaml", {"peft.method=none", "objective.precompute_reference=true"});
  const auto sft = ledger("sft-estimate.yaml", {});
  EXPECT_EQ(lora.count("reference"), 0u);
  EXPECT_EQ(pre.count("reference"), 0u);
  ASSERT_EQ(full.count("reference"), 1u);
  EXPECT_EQ(full.at("reference"), full.at("weights"));  // fp32 model, every weight trains: the same bytes
  // int8 projections (a quarter of their fp32 bytes), the fp32 embedding (a third of this tiny
  // model's weights) and norms as they are.
  EXPECT_LT(int8.at("reference"), full.at("reference") * 6 / 10);
  EXPECT_GT(int8.at("reference"), full.at("reference") / 4);
  EXPECT_EQ(lora.at("symbol B"), 2 * sft.at("symbol B"));  // two rows per pair
  // Unpacked rows are padded to their batch's longest, so T is the data's longest row (these
  // pairs are about 30 byte tokens), not data.max_seq_len; packed rows are filled to it.
  EXPECT_LT(lora.at("symbol T"), 64);
  EXPECT_GT(lora.at("symbol T"), 16);
  EXPECT_EQ(ledger("sft-estimate.yaml", {"data.packing=true"}).at("symbol T"), 64);
  // Under full_shard the copy is sharded as the policy, its quantised projections kept whole.
  const auto sharded = ledger("dpo-estimate.yaml", {"peft.method=none", "--nproc", "4", "distributed.strategy=full_shard"});
  const auto sharded_int8 =
      ledger("dpo-estimate.yaml", {"peft.method=none", "objective.reference_quantize=int8", "--nproc", "4", "distributed.strategy=full_shard"});
  EXPECT_EQ(sharded.at("reference"), (full.at("reference") + 3) / 4);
  EXPECT_EQ(sharded.at("reference"), sharded.at("weights"));
  EXPECT_LT(sharded_int8.at("reference"), int8.at("reference"));
  EXPECT_GT(sharded_int8.at("reference"), int8.at("reference") / 4);
  // And it trains: full fine-tuning against an nf4 reference copy.
  const auto run = ctune({"train", (kDir / "dpo-estimate.yaml").string(), "peft.method=none", "objective.reference_quantize=nf4",
                          "training.max_steps=2", "training.eval_every=0", "output_dir=" + (kDir / "dpo-nf4-reference").string()});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("base quantised to nf4"), std::string::npos) << run.err;
}

TEST_F(Recipes, EstimatePrintsTheLedger) {
  const fs::path recipe = kDir / "estimate.yaml";
  write(recipe, base_recipe());
  auto text = ctune({"estimate", recipe.string()});
  ASSERT_EQ(text.status, 0) << text.err;
  for (const char* line : {"weights", "gradients", "optimizer state", "activations", "logits and loss", "KV cache", "runtime", "allocator", "peak"})
    EXPECT_NE(text.out.find(line), std::string::npos) << line << " missing in\n" << text.out;
  auto ledger = [&](const std::vector<std::string>& overrides) {
    std::vector<std::string> args = {"estimate", recipe.string(), "--json"};
    args.insert(args.end(), overrides.begin(), overrides.end());
    auto r = ctune(args);
    EXPECT_EQ(r.status, 0) << r.err;
    Json j = Json::parse(r.out);
    std::map<std::string, std::int64_t> lines;
    for (const auto& l : j["lines"]) lines[l["name"].get<std::string>()] = l["bytes"].get<std::int64_t>();
    lines["peak"] = j["peak_bytes"].get<std::int64_t>();
    return lines;
  };
  const auto lora = ledger({});
  const auto full = ledger({"peft.method=none"});
  const auto ckpt = ledger({"memory.activation_checkpointing=full"});
  const auto bf16 = ledger({"precision=bf16"});
  const auto nf4 = ledger({"precision=bf16", "memory.quantize_base=nf4"});
  EXPECT_GE(lora.at("peak"), lora.at("weights") + lora.at("optimizer state") + lora.at("runtime"));
  EXPECT_LT(lora.at("gradients") + lora.at("optimizer state"), 0.2 * (full.at("gradients") + full.at("optimizer state")));
  EXPECT_EQ(full.at("optimizer state"), 2 * full.at("gradients"));  // AdamW: two fp32 moments
  EXPECT_LT(ckpt.at("activations"), lora.at("activations"));
  EXPECT_LT(bf16.at("weights"), lora.at("weights"));
  EXPECT_LT(nf4.at("weights"), bf16.at("weights"));
  EXPECT_EQ(lora.at("KV cache"), 0);
  // The test model ties its head: full fine-tuning holds the head's gradient besides the
  // embedding's at backward's end; LoRA's tied matrix is frozen.
  EXPECT_GT(full.at("tied gradients"), 0);
  EXPECT_EQ(lora.at("tied gradients"), 0);
  EXPECT_GT(lora.at("allocator"), 0);
  EXPECT_EQ(ledger({"memory.allocator=exact"}).at("allocator"), 0);
  // Full fine-tuning in bf16 keeps each layer's bf16 copy of its fp32 matmul weights for backward
  // (a subset of the weights at half their bytes); LoRA's frozen base is stored in bf16 (no
  // copy), and layers that recompute cast again.
  const auto full_bf16 = ledger({"peft.method=none", "precision=bf16"});
  ASSERT_EQ(full_bf16.count("compute copies"), 1u);
  EXPECT_GT(full_bf16.at("compute copies"), 0);
  EXPECT_LT(full_bf16.at("compute copies"), full_bf16.at("weights") / 2);
  EXPECT_EQ(bf16.count("compute copies"), 0u);
  EXPECT_EQ(ledger({"peft.method=none", "precision=bf16", "memory.activation_checkpointing=full"}).count("compute copies"), 0u);

  // Per rank: shard_grad_op divides the optimizer state, full_shard the weights and gradients
  // too (plus what is whole for a while); hybrid_shard divides by the ranks of a node; offload
  // moves the shards to the host pool.
  const auto sgo = ledger({"peft.method=none", "distributed.strategy=shard_grad_op", "--nproc", "4"});
  const auto fs4 = ledger({"peft.method=none", "distributed.strategy=full_shard", "--nproc", "4"});
  const auto hy = ledger({"peft.method=none", "distributed.strategy=hybrid_shard", "--nproc", "4", "--nodes", "2"});
  EXPECT_EQ(sgo.at("optimizer state"), full.at("optimizer state") / 4);
  EXPECT_EQ(sgo.at("weights"), full.at("weights"));
  EXPECT_EQ(fs4.at("weights"), full.at("weights") / 4);
  EXPECT_EQ(fs4.at("gradients"), full.at("gradients") / 4);
  EXPECT_GT(fs4.at("gathered"), 0);
  EXPECT_EQ(hy.at("weights"), full.at("weights") / 2);
  auto r = ctune({"estimate", recipe.string(), "peft.method=none", "distributed.strategy=full_shard", "distributed.cpu_offload=true",
                  "--nproc", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("on 2 ranks (full_shard, CPU offload)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[host]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of which host"), std::string::npos) << r.out;
}

// An evaluator of the ledger's printed formulas, written here from their grammar (sums,
// products, integer /, ceil_div(a, b), max(...), min(...), symbols and integers), not from the
// code that prints them.
class FormulaEvaluator {
 public:
  FormulaEvaluator(std::string text, const Json& symbols) : text_(std::move(text)), symbols_(symbols) {}
  std::int64_t value() {
    const auto v = sum();
    skip();
    if (pos_ != text_.size()) throw std::runtime_error("unparsed rest: " + text_.substr(pos_));
    return v;
  }

 private:
  void skip() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool take(const std::string& token) {
    skip();
    if (text_.compare(pos_, token.size(), token) != 0) return false;
    pos_ += token.size();
    return true;
  }
  std::int64_t sum() {
    std::int64_t v = product();
    for (;;) {
      if (take("+")) v += product();
      else if (take("- ")) v -= product();
      else return v;
    }
  }
  std::int64_t product() {
    std::int64_t v = atom();
    for (;;) {
      if (take("x ")) v *= atom();
      else if (take("/")) v /= atom();
      else return v;
    }
  }
  std::int64_t atom() {
    skip();
    if (take("(")) {
      const auto v = sum();
      if (!take(")")) throw std::runtime_error("expected ) in " + text_);
      return v;
    }
    for (const std::string f : {"ceil_div(", "max(", "min("}) {
      if (!take(f)) continue;
      std::vector<std::int64_t> args{sum()};
      while (take(",")) args.push_back(sum());
      if (!take(")")) throw std::runtime_error("expected ) in " + text_);
      if (f == "ceil_div(") {
        if (args.size() != 2) throw std::runtime_error("ceil_div takes two arguments in " + text_);
        return (args[0] + args[1] - 1) / args[1];
      }
      return f == "max(" ? *std::max_element(args.begin(), args.end()) : *std::min_element(args.begin(), args.end());
    }
    std::size_t end = pos_;
    while (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) ++end;
    const std::string word = text_.substr(pos_, end - pos_);
    if (word.empty()) throw std::runtime_error("expected a symbol or a number at '" + text_.substr(pos_) + "'");
    pos_ = end;
    if (std::isdigit(static_cast<unsigned char>(word[0]))) return std::stoll(word);
    if (!symbols_.contains(word)) throw std::runtime_error("unknown symbol " + word + " in " + text_);
    return symbols_[word].get<std::int64_t>();
  }

  std::string text_;
  const Json& symbols_;
  std::size_t pos_ = 0;
};

// Every line's printed formula, evaluated with the printed symbol values, is the line's bytes:
// the text is the computation, across the techniques that change the formulas.
TEST_F(Recipes, LedgerFormulasEvaluateToTheirBytes) {
  const fs::path recipe = kDir / "formulas.yaml";
  write(recipe, base_recipe());
  const std::vector<std::vector<std::string>> settings = {
      {},
      {"peft.method=none"},
      {"memory.activation_checkpointing=every_n:2"},
      {"memory.activation_checkpointing=selective"},
      {"memory.attention=blocked", "precision=bf16"},
      {"precision=bf16", "memory.quantize_base=nf4", "peft.dropout=0.1"},
      {"memory.chunked_loss=false", "training.grad_accum=2"},
      {"peft.method=none", "distributed.strategy=full_shard", "distributed.prefetch=true", "--nproc", "4"},
      {"peft.method=none", "distributed.strategy=shard_grad_op", "--nproc", "2"}};
  // GRPO: the rollout's KV cache, prefill and kept batches (with the old and reference
  // log-probabilities), whole and under full_shard.
  std::string prompts;
  for (int i = 0; i < 6; ++i) prompts += R"({"prompt": "Add )" + std::to_string(i) + R"( and 3 = ", "answer": ")" + std::to_string(i + 3) + "\"}\n";
  write(kDir / "prompts.jsonl", prompts);
  std::string grpo = base_recipe();
  grpo.replace(grpo.find("  eval: "), grpo.find("  max_seq_len") - grpo.find("  eval: "),
               "  format: prompt\n  chat_format: plain\n");
  grpo.replace(grpo.find("train.jsonl"), std::string("train.jsonl").size(), "prompts.jsonl");
  grpo.replace(grpo.find(", eval_every: 2"), std::string(", eval_every: 2").size(), "");
  grpo += "objective: {name: grpo, num_generations: 4, max_new_tokens: 8, beta: 0.1, num_iterations: 2}\nreward: {exact: {field: answer}}\n";
  const fs::path grpo_recipe = kDir / "formulas-grpo.yaml";
  write(grpo_recipe, grpo);
  std::vector<std::pair<fs::path, std::vector<std::string>>> runs;
  for (const auto& extra : settings) runs.emplace_back(recipe, extra);
  runs.push_back({grpo_recipe, {}});
  runs.push_back({grpo_recipe, {"peft.method=none", "distributed.strategy=full_shard", "--nproc", "2"}});
  // Experts under bf16 on the CPU: padded routed rows and oneDNN's kernel cache (its own line).
  const fs::path moe = kDir / "formulas-moe";
  fs::create_directories(moe);
  fs::copy_file(fs::path(CTUNE_SOURCE_DIR) / "recipes/models/qwen3-30b-a3b.json", moe / "config.json", fs::copy_options::overwrite_existing);
  const fs::path moe_recipe = fs::path(CTUNE_SOURCE_DIR) / "recipes/qwen3-30b-a3b-qlora.yaml";
  runs.push_back({moe_recipe, {"model.path=" + moe.string()}});
  runs.push_back({moe_recipe, {"model.path=" + moe.string(), "memory.activation_checkpointing=none", "memory.quantize_base=none"}});
  int lines = 0, rollout_lines = 0, kernel_lines = 0;
  for (const auto& [path, extra] : runs) {
    std::vector<std::string> args = {"estimate", path.string(), "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = ctune(args);
    ASSERT_EQ(r.status, 0) << r.err;
    const Json j = Json::parse(r.out);
    for (const auto& l : j["lines"]) {
      const std::string formula = l["formula"].get<std::string>();
      std::int64_t evaluated = -1;
      try {
        evaluated = FormulaEvaluator(formula, j["symbol_values"]).value();
      } catch (const std::exception& e) {
        ADD_FAILURE() << l["name"] << ": " << e.what();
      }
      EXPECT_EQ(evaluated, l["bytes"].get<std::int64_t>()) << l["name"] << " = " << formula;
      ++lines;
      const std::string name = l["name"].get<std::string>();
      rollout_lines += (name == "KV cache" || name == "generation prefill" || name == "rollout batches") && l["bytes"].get<std::int64_t>() > 0;
      kernel_lines += name == "kernel cache" && l["bytes"].get<std::int64_t>() > 0;
    }
  }
  EXPECT_GE(lines, 11 * 7);
  EXPECT_EQ(rollout_lines, 2 * 3) << "the GRPO runs' generation lines";
  // Where the CPU has no bf16 GEMM, bf16 products run in fp32 through BLAS (ops/compute.h): no
  // oneDNN kernels to cache.
  const int bf16_kernel_runs = ctune::ops::cpu_features::native_bf16_gemm() ? 2 : 0;
  EXPECT_EQ(kernel_lines, bf16_kernel_runs) << "the bf16 expert runs' kernel cache, and only theirs";
}

TEST_F(Recipes, TrainLoraAndFullEndToEnd) {
  const fs::path recipe = kDir / "train.yaml";
  write(recipe, base_recipe());
  auto lora = ctune({"train", recipe.string(), "output_dir=" + (kDir / "run-lora").string()});
  ASSERT_EQ(lora.status, 0) << lora.err;
  EXPECT_NE(lora.err.find("trainable parameters"), std::string::npos);
  expect_run_files(kDir / "run-lora", 3, true);
  // The adapter scores through `eval --adapter`.
  auto eval = ctune({"eval", recipe.string(), "--adapter", (kDir / "run-lora" / "adapter").string(), "--accuracy", "--json"});
  ASSERT_EQ(eval.status, 0) << eval.err;
  EXPECT_TRUE(Json::parse(eval.out).contains("accuracy"));

  auto full = ctune({"train", recipe.string(), "output_dir=" + (kDir / "run-full").string(), "peft.method=none",
                     "training.epochs=1", "training.max_steps=", "data.packing=true", "optimizer.name=sgd"});
  ASSERT_EQ(full.status, 0) << full.err;
  // 40 examples of ~20 tokens packed into rows of 64 -> 4 batches of 4 rows -> 2 steps of 2.
  std::ifstream in(kDir / "run-full" / "metrics.jsonl");
  std::int64_t steps = 0;
  for (std::string line; std::getline(in, line);) steps += Json::parse(line).contains("loss");
  EXPECT_GE(steps, 1);
  expect_run_files(kDir / "run-full", steps, false);
  // A second run into the same directory is refused unless --overwrite.
  auto again = ctune({"train", recipe.string(), "output_dir=" + (kDir / "run-full").string()});
  expect_one_line_failure(again, "already holds files", "rerun");
}

// Same numbers from every door: the eval_loss `train` logs at its last step equals what
// `ctune eval` reports for the written result, because both build the model (dtypes, quantised
// base, adapter) and evaluate it (chunked loss, eval batches) the same way. Both sides compute
// the same float operations on the same weights, so they agree to rounding; 1e-6 relative
// leaves room for a different blocking of the same sums, while a model built differently (an
// unquantised base, fp32 instead of bf16 matmuls) moves the loss by 1e-3 or more.
TEST_F(Recipes, EvalReportsWhatTrainingLogged) {
  const fs::path recipe = kDir / "same.yaml";
  write(recipe, base_recipe());
  auto last_eval_loss = [](const fs::path& run) {
    double loss = -1;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line);
      if (j.contains("eval_loss")) loss = j["eval_loss"].get<double>();
    }
    return loss;
  };
  struct Case {
    std::string name;
    std::vector<std::string> overrides;
    std::string result_flag, result_dir;
  };
  for (const Case& c : {Case{"LoRA bf16 nf4", {"precision=bf16", "memory.quantize_base=nf4"}, "--adapter", "adapter"},
                        Case{"full fp32", {"peft.method=none"}, "--model", "model"}}) {
    const fs::path run = kDir / ("run-same-" + c.result_dir);
    std::vector<std::string> args = {"train", recipe.string(), "output_dir=" + run.string()};
    args.insert(args.end(), c.overrides.begin(), c.overrides.end());
    auto trained = ctune(args);
    ASSERT_EQ(trained.status, 0) << c.name << ": " << trained.err;
    const double logged = last_eval_loss(run);
    ASSERT_GT(logged, 0) << c.name;

    args = {"eval", recipe.string(), c.result_flag, (run / c.result_dir).string(), "--json"};
    args.insert(args.end(), c.overrides.begin(), c.overrides.end());
    auto eval = ctune(args);
    ASSERT_EQ(eval.status, 0) << c.name << ": " << eval.err;
    const double reported = Json::parse(eval.out)["eval_loss"].get<double>();
    EXPECT_TRUE(ctune::test::within(c.name + ": |eval - train's last eval_loss| / eval_loss",
                                    std::abs(reported - logged) / logged, 1e-6))
        << "train logged " << logged << ", eval reported " << reported;
  }
}

// Perplexity: `ctune eval` reports exp of the mean token NLL, and over plain text (BOS + text,
// every token after the first a target) that mean is the mean of `ctune score`'s NLLs of the
// same documents. Batched with padding against one document at a time: fp32 rounding apart.
TEST_F(Recipes, PerplexityIsExpOfTheMeanScoreNll) {
  const std::vector<std::string> docs = {"The cat sat on the mat.", "Perplexity is exp of the mean NLL!",
                                         "Short one", "A somewhat longer document about nothing in particular."};
  {
    std::ofstream f(kDir / "ppl.jsonl");
    for (const auto& d : docs) f << Json{{"text", d}}.dump() << "\n";
  }
  const fs::path recipe = kDir / "ppl.yaml";
  const std::string d = kDir.string();
  write(recipe, "output_dir: " + d + "/run-ppl\nmodel: {path: " + d + "/model}\n"
                "data: {train: " + d + "/ppl.jsonl, eval: " + d + "/ppl.jsonl, format: text, add_eos: false, packing: false, max_seq_len: 128}\n"
                "training: {batch_size: 3, max_steps: 1}\n");
  const auto eval = ctune({"eval", recipe.string(), "--json"});
  ASSERT_EQ(eval.status, 0) << eval.err;
  const Json e = Json::parse(eval.out);
  double sum = 0;
  std::int64_t count = 0;
  for (const auto& doc : docs) {
    const auto score = ctune({"score", "--model", (kDir / "model").string(), "--text", doc, "--json"});
    ASSERT_EQ(score.status, 0) << score.err;
    const Json scored = Json::parse(score.out);
    for (const auto& v : scored["nll"]) sum += v.get<double>(), ++count;
  }
  EXPECT_EQ(e["eval_tokens"].get<std::int64_t>(), count);
  const double ppl = std::exp(sum / static_cast<double>(count));
  EXPECT_TRUE(ctune::test::within("|eval_ppl - exp(mean score NLL)| / ppl", std::abs(e["eval_ppl"].get<double>() - ppl) / ppl, 1e-5))
      << "eval_ppl " << e["eval_ppl"] << ", from score " << ppl;
  EXPECT_NEAR(e["eval_ppl"].get<double>(), std::exp(e["eval_loss"].get<double>()), 1e-9 * ppl);

  // Without a recipe: --model and --data (with the same data keys as overrides) give the same
  // numbers; the text form is a table; a recipe with --data, or neither, is refused.
  const std::vector<std::string> bare = {"eval", "--model", d + "/model", "--data", d + "/ppl.jsonl", "--format", "text",
                                         "data.add_eos=false", "data.max_seq_len=128"};
  auto direct = bare;
  direct.push_back("--json");
  const auto no_recipe = ctune(direct);
  ASSERT_EQ(no_recipe.status, 0) << no_recipe.err;
  const Json n = Json::parse(no_recipe.out);
  EXPECT_EQ(n["eval_tokens"], e["eval_tokens"]);
  // The default eval batch (not the recipe's 3 rows) rounds the fp32 sums differently.
  EXPECT_NEAR(n["eval_loss"].get<double>(), e["eval_loss"].get<double>(), 1e-6 * e["eval_loss"].get<double>());
  const auto table = ctune(bare);
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("perplexity"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("4 examples (text)"), std::string::npos) << table.out;
  // The model's context (512) is shorter than data.max_seq_len's default (1024): without a
  // recipe or the key, eval stays within it and warns about nothing.
  const auto within_context = ctune({"eval", "--model", d + "/model", "--data", d + "/ppl.jsonl", "--format", "text", "data.add_eos=false"});
  ASSERT_EQ(within_context.status, 0) << within_context.err;
  EXPECT_EQ(within_context.err.find("max_position_embeddings"), std::string::npos) << within_context.err;
  expect_one_line_failure(ctune({"eval", recipe.string(), "--data", d + "/ppl.jsonl"}), "--data/--format replace a recipe", "recipe and --data");
  expect_one_line_failure(ctune({"eval", "--data", d + "/ppl.jsonl"}), "give RECIPE, or --model DIR and --data FILE", "no model");
}

}  // namespace
