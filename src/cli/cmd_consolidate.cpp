// `ctune consolidate CHECKPOINT --out DIR [--shard-size 5GB] [--overwrite]`: a sharded
// checkpoint (one file per rank, train/state/sharded_checkpoint.h) made whole: a Hugging Face model
// directory (full fine-tuning) or a PEFT adapter (LoRA), as a whole checkpoint's or the run's
// result's weights are, for `merge`, `export`, `generate`, `eval` or other tools. Each tensor is
// assembled from every rank's slices; then what was written is read back the way its users
// read it and compared bit for bit before the directory is renamed into place.
#include <ATen/ATen.h>

#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "core/method_names.h"
#include "core/progress.h"
#include "io/file.h"
#include "io/hf_checkpoint.h"
#include "io/run_dir.h"
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "peft/model_spec.h"
#include "train/state/checkpoint.h"

namespace ctune::cli {
namespace fs = std::filesystem;

namespace {

struct ConsolidateOptions {
  std::string checkpoint, out, shard_size = "5GB";
  bool overwrite = false;
};

// The written weights, loaded as their users load them: the model from its directory; the
// adapter onto its base (when the base it names is there).
std::vector<std::pair<std::string, at::Tensor>> read_back(MethodKind method, const fs::path& dir) {
  if (method == MethodKind::full) {
    auto lm = model::load_causal_lm(dir, at::kFloat);
    return model::checkpoint_state_dict(lm);  // the layout written (fused projections fused)
  }
  peft::read_adapter_config(dir);  // every setting one that loads
  const fs::path config = dir / peft::kAdapterConfig;
  const auto base = json_string(read_json_file(config), "base_model_name_or_path", config.string()).value_or("");
  std::error_code ec;
  if (base.empty() || !fs::exists(fs::path(base) / "config.json", ec)) {
    spdlog::warn("the adapter's base {} is not here: the adapter is not loaded onto it to check", base.empty() ? "(none named)" : base);
    return {};
  }
  peft::ModelSpec spec;
  spec.weights = base;
  spec.adapter = dir;
  auto lm = peft::build_model(spec);
  return peft::adapter_state_dict(lm);
}

int run_consolidate(const ConsolidateOptions& o) {
  // Never onto the checkpoint, nor onto what its run read: --out BASE --overwrite would replace
  // the base model the checkpoint needs.
  io::NamedPaths inputs{{"CHECKPOINT", o.checkpoint}};
  for (const auto& [name, path] : train::checkpoint_inputs(o.checkpoint)) inputs.emplace_back(name + " of the checkpoint's run", path);
  io::refuse_unsafe_output(o.out, "--out", inputs);
  const auto max_shard_bytes = io::parse_byte_size(o.shard_size, "--shard-size");
  io::StagingDir staging(o.out, o.overwrite);
  Stage stage("writing " + o.out, 0, "tensors");
  const auto c = train::consolidate_checkpoint(o.checkpoint, staging.path(), max_shard_bytes);
  stage.finish();
  std::uint64_t bytes = 0;
  for (const auto& [name, t] : c.tensors) bytes += t.nbytes();
  spdlog::info("step {}: {} tensors ({:.1f} MB) assembled from {} shard files", c.step, c.tensors.size(),
               static_cast<double>(bytes) / 1e6, c.shards);

  // Self-check: what was written, read back, equals what was assembled, tensor by tensor.
  const MethodKind method = find_method(c.method)->kind;  // consolidate_checkpoint refuses unknown names
  const auto written = read_back(method, staging.path());
  if (!written.empty()) {
    std::map<std::string, at::Tensor> by_name(written.begin(), written.end());
    for (const auto& [name, t] : c.tensors) {
      const auto it = by_name.find(name);
      if (!at::isfinite(t).all().item<bool>()) throw Error("self-check failed: \"" + name + "\" holds non-finite values (the checkpoint's run diverged?)");
      if (it == by_name.end() || !at::equal(it->second.to(t.scalar_type()), t)) {
        throw Error("self-check failed: \"" + name + "\" reads back " + (it == by_name.end() ? "missing" : "different") + " from " + o.out);
      }
    }
    if (by_name.size() != c.tensors.size()) {
      throw Error("self-check failed: " + o.out + " reads back " + std::to_string(by_name.size()) + " tensors, " +
                  std::to_string(c.tensors.size()) + " were assembled");
    }
    spdlog::info("self-check: {} tensors read back identical", written.size());
  }
  staging.commit();
  spdlog::info("wrote {} ({})", o.out, method == MethodKind::full ? "a Hugging Face model" : "a PEFT LoRA adapter");
  return 0;
}

}  // namespace

CLI::App* add_consolidate_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<ConsolidateOptions>();
  auto* cmd = app.add_subcommand("consolidate", "Make a sharded checkpoint whole: a Hugging Face model or a PEFT adapter");
  cmd->add_option("checkpoint", opts->checkpoint, "A checkpoint directory written with checkpoint.layout: sharded")->required();
  cmd->add_option("--out", opts->out, "Output directory (written atomically)")->required();
  cmd->add_option("--shard-size", opts->shard_size, "Largest safetensors file of a model, e.g. 5GB, 200MB");
  cmd->add_flag("--overwrite", opts->overwrite, "Replace an existing output directory");
  cmd->callback([opts, &run] { run = [opts] { return run_consolidate(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
