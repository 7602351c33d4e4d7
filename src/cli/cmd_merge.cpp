// `ctune merge --base DIR --adapter DIR --out DIR [--dtype ...]`: folds a LoRA adapter into its
// base (W + s * B A in fp32, then cast) and writes a Hugging Face model directory (config,
// safetensors sharded past --shard-size, tokenizer files) that loads wherever the base loads.
// Then it reloads what it wrote and compares per-token NLL on a probe with base + adapter;
// a difference past the tolerance is an error.
#include <ATen/core/grad_mode.h>
#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "infer/score.h"
#include "io/file.h"
#include "io/hf_checkpoint.h"
#include "io/run_dir.h"
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "peft/model_spec.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::cli {
namespace fs = std::filesystem;

namespace {

struct MergeOptions {
  std::string base, adapter, out, dtype, shard_size = "5GB";
  double tolerance = -1;  // < 0: the default for the output dtype
  bool overwrite = false;
};

// A probe the self-check scores: a fixed text through the model's tokenizer, or fixed ids.
std::vector<std::int64_t> probe_ids(const fs::path& model_dir, std::int64_t vocab) {
  std::vector<std::int64_t> ids;
  try {
    auto tokenizer = tok::load_tokenizer(model_dir);
    for (auto id : tokenizer->encode("The quick brown fox jumps over the lazy dog; ctune checks 1234567890 merged weights.", true))
      ids.push_back(id);
  } catch (const Error&) {
    // No tokenizer beside the weights: a deterministic spread of ids does as well.
  }
  if (ids.size() < 8) {
    ids.clear();
    for (std::int64_t i = 0; i < 48; ++i) ids.push_back((i * 7919 + 13) % vocab);
  }
  return ids;
}

int run_merge(const MergeOptions& o) {
  // Never into "/", the home directory or an input; --overwrite replaces an earlier model only.
  io::refuse_unsafe_output(o.out, "--out", {{"--base", o.base}, {"--adapter", o.adapter}});
  std::error_code ec;
  if (fs::is_directory(o.out, ec) && !fs::is_empty(o.out, ec) && !fs::exists(fs::path(o.out) / "config.json", ec)) {
    throw ConfigError("--out " + o.out + ": not empty and holds no model (config.json); merge writes only into a new, "
                      "empty or earlier merged model directory");
  }
  auto config = model::load_model_config(o.base);
  const auto out_dtype = model::parse_dtype(o.dtype.empty() ? config.dtype : o.dtype, o.dtype.empty() ? "base dtype" : "--dtype");
  const auto max_shard_bytes = io::parse_byte_size(o.shard_size, "--shard-size");
  // fp32 output should reproduce base + adapter to rounding; bf16/fp16 outputs round every weight.
  const double tolerance = o.tolerance >= 0 ? o.tolerance : out_dtype == at::kFloat ? 1e-4 : 0.1;

  // Source: base + adapter in fp32, and its scores on the probe.
  peft::ModelSpec source;
  source.weights = o.base;
  source.adapter = o.adapter;
  auto lm = peft::build_model(source);
  const auto lora = peft::read_adapter_config(o.adapter);
  const auto probe = probe_ids(o.base, config.vocab_size);
  const auto reference = infer::score_tokens(lm, probe, "probe");

  // Merge in fp32, cast, write.
  const auto merged = peft::merge_lora(lm);
  {
    at::NoGradGuard no_grad;
    for (auto& p : lm->named_parameters()) {
      p.value().set_data(p.value().to(out_dtype));
      if (!at::isfinite(p.value()).all().item<bool>()) {
        throw FormatError("merge: " + p.key() + " holds non-finite values in " + model::dtype_to_hf(out_dtype) +
                          " (past the dtype's range?); nothing was written");
      }
    }
  }
  io::StagingDir staging(o.out, o.overwrite);
  {
    Stage stage("writing " + o.out, static_cast<std::int64_t>(model::hf_state_dict(lm).size()), "tensors");
    model::write_causal_lm_files(lm, staging.path(), max_shard_bytes);
    stage.finish();
  }
  if (io::has_tokenizer_files(o.base)) {
    io::copy_tokenizer_files(o.base, staging.path());  // a failed copy (a full disk) fails the merge
  } else {
    spdlog::warn("{} has no tokenizer files to copy", o.base);
  }
  spdlog::info("merged {} LoRA layers (r={}, alpha={}{}), {}", merged, lora.rank, lora.alpha, lora.rslora ? ", rsLoRA" : "",
               model::dtype_to_hf(out_dtype));

  // Self-check: what was written, reloaded, against base + adapter; only a model that passes
  // is renamed into place. The merged model is written and the reference scored: it is dropped
  // first, so that it never coexists with the reloaded one.
  lm = nullptr;
  Stage checking("self-check of " + o.out);
  peft::ModelSpec written;
  written.weights = staging.path();
  auto reloaded = peft::build_model(written);
  const double diff = infer::max_abs_difference(infer::score_tokens(reloaded, probe, "probe").nll, reference.nll);
  checking.finish();
  spdlog::info("self-check: max |NLL(merged) - NLL(base + adapter)| = {:.3g} over {} tokens (tolerance {:.3g})", diff,
               probe.size() - 1, tolerance);
  if (!(diff <= tolerance)) {
    throw Error("self-check failed: " + o.out + " scores " + std::to_string(diff) + " nats/token away from base + adapter (tolerance " +
                std::to_string(tolerance) + ")");
  }
  staging.commit();
  spdlog::info("wrote {}", o.out);
  return 0;
}

}  // namespace

CLI::App* add_merge_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<MergeOptions>();
  auto* cmd = app.add_subcommand("merge", "Fold a LoRA adapter into its base model and write a Hugging Face directory");
  cmd->add_option("--base", opts->base, "Base model directory")->required();
  cmd->add_option("--adapter", opts->adapter, "PEFT LoRA adapter directory")->required();
  cmd->add_option("--out", opts->out, "Output model directory (written atomically)")->required();
  cmd->add_option("--dtype", opts->dtype, "Output dtype: bf16, fp16 or fp32 (default: the base's dtype)");
  cmd->add_option("--shard-size", opts->shard_size, "Largest shard, e.g. 5GB, 200MB");
  cmd->add_option("--tolerance", opts->tolerance, "Self-check tolerance in nats/token (default 1e-4 for fp32, 0.1 otherwise)");
  cmd->add_flag("--overwrite", opts->overwrite, "Replace an existing output directory");
  cmd->callback([opts, &run] { run = [opts] { return run_merge(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
