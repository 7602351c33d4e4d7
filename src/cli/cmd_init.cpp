// `ctune init`: a random-initialised checkpoint in Hugging Face layout from a config.json,
// optionally with a tokenizer, for training from scratch and for tests.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "core/progress.h"
#include "io/file.h"
#include "io/hf_checkpoint.h"
#include "model/parameter_shapes.h"
#include "model/weights.h"
#include "ops/memory.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::cli {
namespace fs = std::filesystem;

namespace {

struct InitOptions {
  std::string config_path;
  std::string out;
  std::uint64_t seed = 0;
  std::string dtype;  // empty: the config's own dtype
  std::string tokenizer;
  std::string shard_size = "5GB";
  bool overwrite = false;
};


// init_weights writes every weight, sampling each in fp32 first (model/weights.h): a model past
// what the process can hold would be SIGKILLed by the OOM killer partway, so it is refused first.
// The model is built (its weights reserved, not yet written): writing them needs their memory,
// sampling the largest its fp32 buffer in memory and address space.
void check_init_fits(const torch::nn::Module& lm) {
  std::int64_t weights = 0, sample = 0;
  for (const auto& p : lm.parameters()) {
    weights += static_cast<std::int64_t>(p.nbytes());
    sample = std::max<std::int64_t>(sample, p.numel() * 4);
  }
  ops::require_host_memory("init", {weights + sample, sample},
                           "the weights, " + format_bytes(weights) + ", reserved as the model was built and written now, and beside them " +
                               "the largest sampled in fp32, " + format_bytes(sample));
}

int run_init(const InitOptions& o) {
  const fs::path config_path(o.config_path);
  auto config = model::parse_model_config(read_json_file(config_path), config_path.string());
  const auto dtype = model::parse_dtype(o.dtype.empty() ? config.dtype : o.dtype, o.dtype.empty() ? config_path.string() + ": dtype" : "--dtype");
  model::SaveOptions save;
  save.max_shard_bytes = io::parse_byte_size(o.shard_size, "--shard-size");
  save.overwrite = o.overwrite;

  model::CausalLM lm(config, dtype);  // allocated, not yet touched: init_weights writes every page
  check_init_fits(*lm);
  model::init_weights(lm, o.seed);
  model::save_causal_lm(lm, o.out, save, [&](const fs::path& staging) {
    if (o.tokenizer.empty()) return;
    if (o.tokenizer == "byte") {
      tok::write_byte_tokenizer(staging);
    } else {
      io::copy_tokenizer_files(o.tokenizer, staging);
    }
    auto tokenizer = tok::load_tokenizer(staging);
    if (static_cast<std::int64_t>(tokenizer->vocab_size()) > config.vocab_size) {
      throw ConfigError("--tokenizer: tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                        " tokens but config vocab_size is " + std::to_string(config.vocab_size) +
                        " (expected vocab_size >= tokenizer size)");
    }
  });
  spdlog::info("wrote {} ({} parameters, {}, seed {})", o.out, model::parameter_count(model::parameter_shapes(*lm)), model::dtype_to_hf(dtype), o.seed);
  return 0;
}

}  // namespace

CLI::App* add_init_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<InitOptions>();
  auto* cmd = app.add_subcommand("init", "Write a random-initialised checkpoint (Hugging Face layout) from a config.json");
  cmd->add_option("--config", opts->config_path, "config.json describing the architecture")->required();
  cmd->add_option("--out", opts->out, "Output directory (created atomically)")->required();
  cmd->add_option("--seed", opts->seed, "Random seed for the weights");
  cmd->add_option("--dtype", opts->dtype, "Storage dtype: bf16, fp16 or fp32 (default: the config's dtype)");
  cmd->add_option("--tokenizer", opts->tokenizer, "\"byte\" (a byte-level tokenizer) or a directory to copy tokenizer files from");
  cmd->add_option("--shard-size", opts->shard_size, "Largest shard, e.g. 5GB, 200MB, 2GiB (HF naming and index beyond one shard)");
  cmd->add_flag("--overwrite", opts->overwrite, "Replace an existing non-empty output directory");
  cmd->callback([opts, &run] { run = [opts] { return run_init(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
