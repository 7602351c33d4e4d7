#include "train/state/checkpoint.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "core/kill_point.h"
#include "core/log.h"
#include "core/progress.h"
#include "io/file.h"
#include "io/hf_checkpoint.h"
#include "io/manifest.h"
#include "io/safetensors.h"
#include "io/tensor_io.h"
#include "model/config.h"
#include "model/weights.h"

namespace ctune::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kRngFile = "rng.safetensors";
constexpr const char* kSourceFile = "batch_source.safetensors";  // CheckpointSources::source_state's tensors
using io::kRecipeFile;  // a checkpoint keeps its recipe under the run's name for it

std::vector<std::pair<std::string, at::Tensor>> rng_states() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto cpu = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(cpu.mutex());
    out.emplace_back("cpu", cpu.get_state());
  }
  if (at::hasCUDA()) {
    for (int i = 0; i < static_cast<int>(at::getNumGPUs()); ++i) {
      auto gen = at::globalContext().defaultGenerator(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i)));
      std::lock_guard<std::mutex> lock(gen.mutex());
      out.emplace_back("cuda:" + std::to_string(i), gen.get_state());
    }
  }
  return out;
}

void write_tensors(const fs::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<at::Tensor> keep;
  io::write_safetensors(path, io::describe_tensors(tensors, &keep));
}

std::vector<std::pair<std::string, at::Tensor>> read_tensors(const fs::path& path) {
  auto file = io::SafetensorsFile::open(path);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& t : file->header().tensors) out.emplace_back(t.name, io::load_tensor(*file, t, std::nullopt).clone());
  return out;
}

}  // namespace

CheckpointManager::CheckpointManager(fs::path output_dir, std::int64_t keep_last)
    : root_(output_dir / io::kCheckpointsDir), keep_last_(keep_last) {}

fs::path CheckpointManager::dir_for(const fs::path& output_dir, std::int64_t step) { return io::checkpoint_dir(output_dir, step); }

fs::path CheckpointManager::write(std::int64_t step, const CheckpointSources& s) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  const fs::path target = dir_for(root_.parent_path(), step);
  Stage stage("checkpoint " + target.filename().string(), 0, "tensors");
  io::StagingDir staging(target, /*overwrite=*/true);
  const fs::path& dir = staging.path();

  // 1. Weights, as the method keeps them (the model, or the adapter).
  model::CausalLM model = s.model;  // a handle: the same module
  s.method->write_weights(model, dir, s.files);
  kill_point("checkpoint", step, "weights");

  // 2. Training state: step, data cursor, optimizer, RNG, recipe.
  write_state(dir, step, s, "whole", &s.optimizer_state);
  kill_point("checkpoint", step, "state");

  // 3. The manifest, last; then fsync and rename into place.
  finish(staging, target, step);
  stage.finish();
  return target;
}

void CheckpointManager::write_sharded(std::int64_t step, const CheckpointSources& s, const model::ModelConfig& config,
                                      const ShardPart& part, distributed::Comm& comm) {
  // Every rank writes into the same staging directory: rank 0's unguessable tag, agreed by a
  // sum in which the other ranks add nothing (io::unique_tag: a planted name is never used).
  const fs::path target = dir_for(root_.parent_path(), step);
  Stage stage("checkpoint " + target.filename().string(), 0, "tensors");  // each rank's own count
  std::string tag = comm.rank() == 0 ? io::unique_tag() : std::string();
  at::Tensor agreed = at::zeros({32}, at::kLong);
  for (std::size_t i = 0; i < tag.size() && i < 32; ++i) agreed[static_cast<std::int64_t>(i)] = static_cast<std::int64_t>(tag[i]);
  comm.all_reduce_sum(agreed, "agreeing on the checkpoint's staging directory");
  tag.clear();
  for (std::int64_t i = 0; i < 32 && agreed[i].item<std::int64_t>() != 0; ++i) tag += static_cast<char>(agreed[i].item<std::int64_t>());
  std::optional<io::StagingDir> staging;
  if (comm.rank() == 0) {
    std::error_code ec;
    fs::create_directories(root_, ec);
    staging.emplace(target, /*overwrite=*/true, tag);
  }
  comm.barrier("waiting for rank 0 to stage a checkpoint");

  // 1. Each rank's shard of the weights and optimizer state.
  const fs::path dir = io::StagingDir::staging_path(target, tag);
  if (part.index >= 0) write_state_shard(dir, part.index, part.count, part.shard);
  kill_point("checkpoint", step, "shard");
  comm.barrier("waiting for every rank to write its checkpoint shard");
  if (comm.rank() != 0) return;
  // Published only with every shard in place: the barrier counts arrivals, not files.
  for (int i = 0; i < part.count; ++i) {
    const fs::path shard = dir / kShardsDir / state_shard_file_name(i, part.count);
    std::error_code ec;
    if (!fs::is_regular_file(shard, ec)) {
      throw IoError("checkpoint " + target.filename().string() + ": " + state_shard_file_name(i, part.count) +
                    " is missing after every rank reported its shard written; the checkpoint is not published");
    }
  }

  // 2. Rank 0: what the weights hold besides their tensors, and the training state.
  s.method->write_weight_metadata(config, dir, s.files);
  write_state(dir, step, s, "sharded", nullptr);
  kill_point("checkpoint", step, "state");

  // 3. The manifest (over every shard), last; then fsync and rename into place.
  finish(*staging, target, step);
  stage.finish();
}

void CheckpointManager::write_state(const fs::path& dir, std::int64_t step, const CheckpointSources& s, const char* layout,
                                    const std::vector<std::pair<std::string, at::Tensor>>* optimizer) const {
  Json state = {{"format", "ctune-trainer-state-1"},
                {"step", step},
                {"epoch", s.sampler->epoch()},
                {"accumulation_position", 0},  // checkpoints are taken between optimizer steps
                {"sampler", s.sampler->state().to_json()},
                {"method", s.method->name()},
                {"layout", layout},
                {"inputs", s.inputs}};
  for (const auto& entry : s.run_files) state["run_files"].push_back(io::entry_to_json(entry));
  if (!s.programs.empty()) state["programs"] = s.programs;
  if (s.scaler && s.scaler->enabled()) {
    state["loss_scaler"] = {{"scale", s.scaler->state().scale}, {"growth_tracker", s.scaler->state().growth_tracker}};
  }
  if (!s.source_state.note.is_null()) {
    state["batch_source"] = s.source_state.note;
    write_tensors(dir / kSourceFile, s.source_state.tensors);
  }
  io::write_file_atomic(dir / kStateFile, state.dump(1) + "\n");
  if (optimizer) write_tensors(dir / kOptimizerFile, *optimizer);
  write_tensors(dir / kRngFile, rng_states());
  io::write_file_atomic(dir / kRecipeFile, s.recipe_yaml);
}

void CheckpointManager::finish(io::StagingDir& staging, const fs::path& target, std::int64_t step) {
  io::write_manifest(staging.path());
  kill_point("checkpoint", step, "manifest");
  staging.commit();
  kill_point("checkpoint", step, "renamed");
  verified_.insert(target);
  apply_retention();
}

void CheckpointManager::apply_retention() const {
  std::error_code ec;
  std::vector<std::pair<std::int64_t, fs::path>> complete;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::int64_t step = io::checkpoint_step(e.path());
    if (step < 0) {
      // A staging directory left by a killed write.
      if (e.path().filename().string().find(".partial-") != std::string::npos) fs::remove_all(e.path(), ec);
      continue;
    }
    if (verified(e.path())) complete.emplace_back(step, e.path());
  }
  std::sort(complete.begin(), complete.end(), std::greater<>());
  for (std::size_t i = static_cast<std::size_t>(keep_last_); i < complete.size(); ++i) {
    if (!protected_.empty() && fs::weakly_canonical(complete[i].second, ec) == protected_) continue;
    fs::remove_all(complete[i].second, ec);
    verified_.erase(complete[i].second);
  }
}

void CheckpointManager::protect(const fs::path& checkpoint) {
  std::error_code ec;
  protected_ = fs::weakly_canonical(checkpoint, ec);
}

// A sharded checkpoint must list every shard its shard files name (rank-i-of-N for each i < N),
// not only the files that happen to be there.
std::string verify_checkpoint(const fs::path& dir) {
  std::vector<std::string> required{kStateFile};
  std::error_code ec;
  int count = 0;
  for (const auto& e : fs::directory_iterator(dir / kShardsDir, ec)) {
    if (const auto parsed = parse_state_shard_file_name(e.path().filename().string())) count = std::max(count, parsed->second);
  }
  for (int i = 0; i < count; ++i) required.push_back(std::string(kShardsDir) + "/" + state_shard_file_name(i, count));
  return io::verify_manifest(dir, required);
}

bool CheckpointManager::verified(const fs::path& dir) const {
  if (verified_.count(dir)) return true;
  if (!verify_checkpoint(dir).empty()) return false;
  verified_.insert(dir);
  return true;
}

std::optional<fs::path> CheckpointManager::latest(std::vector<std::string>* skipped) const {
  std::error_code ec;
  std::vector<std::pair<std::int64_t, fs::path>> candidates;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::int64_t step = io::checkpoint_step(e.path());
    if (step >= 0 && e.is_directory()) candidates.emplace_back(step, e.path());
  }
  std::sort(candidates.begin(), candidates.end(), std::greater<>());
  for (const auto& [step, dir] : candidates) {
    std::string problem = verify_checkpoint(dir);
    if (problem.empty()) {
      verified_.insert(dir);
      return dir;
    }
    if (skipped) skipped->push_back(dir.string() + ": " + problem);
  }
  return std::nullopt;
}

io::NamedPaths checkpoint_inputs(const fs::path& checkpoint) {
  io::NamedPaths out;
  try {
    const Json state = read_json_file(checkpoint / kStateFile);
    if (!state.is_object() || !state.contains("inputs") || !state["inputs"].is_object()) return out;
    for (const auto& [name, input] : state["inputs"].items()) {
      if (input.is_object() && input.contains("path") && input["path"].is_string()) out.emplace_back(name, input["path"].get<std::string>());
    }
  } catch (const Error&) {
    // Unreadable: the command reading the checkpoint reports it.
  }
  return out;
}

namespace {
std::vector<io::ManifestEntry> read_run_files(const Json& list, const fs::path& state_path) {
  std::vector<io::ManifestEntry> out;
  if (!list.is_array()) throw FormatError(state_path.string() + ": \"run_files\" must be a list, found " + json_type_name(list));
  for (const Json& item : list) {
    auto entry = io::entry_from_json(item);
    if (!entry) {
      throw FormatError(state_path.string() + ": malformed \"run_files\" entry " + item.dump().substr(0, 120) + " (expected " +
                        io::kManifestEntryShape + ")");
    }
    out.push_back(std::move(*entry));
  }
  return out;
}
}  // namespace

TrainingState read_training_state(const fs::path& checkpoint) {
  TrainingState s;
  const fs::path state_path = checkpoint / kStateFile;
  const Json state = read_json_file(state_path);
  if (!state.is_object() || state.value("format", "") != "ctune-trainer-state-1") {
    throw FormatError(state_path.string() + ": not a ctune trainer state (expected format ctune-trainer-state-1)");
  }
  s.step = json_int(state, "step", state_path.string()).value_or(-1);
  if (s.step < 0) throw FormatError(state_path.string() + ": missing \"step\"");
  if (!state.contains("sampler")) throw FormatError(state_path.string() + ": missing \"sampler\"");
  s.sampler = data::SamplerState::from_json(state["sampler"], state_path.string());
  if (state.contains("loss_scaler")) {
    const auto& ls = state["loss_scaler"];
    if (!ls.is_object() || !ls.contains("scale") || !ls["scale"].is_number() || !ls.contains("growth_tracker") ||
        !ls["growth_tracker"].is_number_integer()) {
      throw FormatError(state_path.string() + ": \"loss_scaler\" must hold a number \"scale\" and an integer \"growth_tracker\"");
    }
    s.scaler = GradScalerState{ls["scale"].get<double>(), ls["growth_tracker"].get<std::int64_t>()};
  }
  s.optimizer = is_sharded_checkpoint(checkpoint) ? ShardedState(checkpoint).optimizer() : read_tensors(checkpoint / kOptimizerFile);
  s.rng = read_tensors(checkpoint / kRngFile);
  s.recipe_yaml = io::read_text_file(checkpoint / kRecipeFile);
  if (state.contains("batch_source")) {
    s.source.note = state["batch_source"];
    s.source.tensors = read_tensors(checkpoint / kSourceFile);
  }
  if (state.contains("inputs")) {
    s.inputs = state["inputs"];
    if (!s.inputs.is_object()) throw FormatError(state_path.string() + ": \"inputs\" must be an object");
    for (const auto& item : s.inputs.items()) {
      const Json& v = item.value();
      if (!v.is_object() || !v.contains("path") || !v["path"].is_string() || !v.contains("fingerprint") ||
          !v["fingerprint"].is_string()) {
        throw FormatError(state_path.string() + ": \"inputs\"." + item.key() + " must be {\"path\": string, \"fingerprint\": string}");
      }
    }
  }
  if (state.contains("run_files")) s.run_files = read_run_files(state["run_files"], state_path);
  if (state.contains("programs")) {
    s.programs = state["programs"];
    bool valid = s.programs.is_object();
    for (const auto& program : s.programs) {
      valid = valid && program.is_object();
      for (const auto& fingerprint : program) valid = valid && fingerprint.is_string();
    }
    if (!valid) throw FormatError(state_path.string() + ": \"programs\" must be {name: {path: fingerprint}}");
  }
  return s;
}

// The run's base model configuration, which names a LoRA adapter's tensors (a multimodal
// wrapper's text model sits under its prefix); a plain one, with a warning, when the base is no
// longer there.
static model::ModelConfig base_model_config(const fs::path& checkpoint) {
  for (const auto& [name, path] : checkpoint_inputs(checkpoint)) {
    std::error_code ec;
    if (name == "model.path" && fs::exists(path / "config.json", ec)) return model::load_model_config(path);
  }
  spdlog::warn("{}: the run's base model is not here: adapter tensors are named as for a text-only model", checkpoint.string());
  return {};
}

Consolidated consolidate_checkpoint(const fs::path& checkpoint, const fs::path& dir, std::uint64_t max_shard_bytes) {
  const std::string problem = verify_checkpoint(checkpoint);
  if (!problem.empty()) throw FormatError(checkpoint.string() + ": not a usable checkpoint: " + problem);
  if (!is_sharded_checkpoint(checkpoint)) {
    throw FormatError(checkpoint.string() + ": not a sharded checkpoint (no " + kShardsDir + "/): its weights are whole already");
  }
  const fs::path state_path = checkpoint / kStateFile;
  const Json state = read_json_file(state_path);
  Consolidated out;
  out.method = json_string(state, "method", state_path.string()).value_or("");
  out.step = json_int(state, "step", state_path.string()).value_or(-1);
  const ShardedState shards(checkpoint);
  out.shards = shards.shard_count();
  out.tensors = shards.weights();
  // Rank 0's files of the weights: everything at the top but the training state and manifest.
  const std::set<std::string> training = {kStateFile, kOptimizerFile, kRngFile, kRecipeFile, io::kManifestName};
  for (const auto& e : fs::directory_iterator(checkpoint)) {
    if (!e.is_regular_file() || training.count(e.path().filename().string())) continue;
    std::error_code ec;
    fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) throw IoError((dir / e.path().filename()).string() + ": cannot copy (" + ec.message() + ")");
  }
  const MethodNames* method = find_method(out.method);
  if (method == nullptr) throw FormatError(state_path.string() + ": unknown \"method\" \"" + out.method + "\" (expected full or lora)");
  // The shards hold the model's parameters; a full model is written in its checkpoint's layout
  // (Qwen3-Next's fused projections fused back; config.json is among rank 0's files).
  if (method->kind == MethodKind::full) out.tensors = model::fuse_parameters(model::load_model_config(dir), std::move(out.tensors));
  write_weight_tensors(method->kind, method->kind == MethodKind::lora ? base_model_config(checkpoint) : model::ModelConfig{},
                       out.tensors, dir, max_shard_bytes);
  return out;
}

void restore_rng(const std::vector<std::pair<std::string, at::Tensor>>& rng) {
  for (const auto& [name, state] : rng) {
    at::Generator gen;
    if (name == "cpu") {
      gen = at::detail::getDefaultCPUGenerator();
    } else if (name.rfind("cuda:", 0) == 0 && at::hasCUDA()) {
      const auto index = std::stoi(name.substr(5));
      if (index >= static_cast<int>(at::getNumGPUs())) continue;
      gen = at::globalContext().defaultGenerator(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index)));
    } else {
      spdlog::warn("checkpoint RNG state \"{}\" has no device here; skipped", name);
      continue;
    }
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
}

SourceState split_source_state(const SourceState& state, int rank, int ranks) {
  const bool gathered = state.note.is_object() && state.note.contains("ranks");
  if (!gathered) {
    if (ranks > 1) throw FormatError("its pending generation batch is one process's; resume it with one process");
    return state;
  }
  const Json& parts = state.note["ranks"];
  if (!parts.is_array() || static_cast<int>(parts.size()) != ranks)
    throw FormatError("its pending generation batch is split over " + (parts.is_array() ? std::to_string(parts.size()) : std::string("?")) +
                      " ranks; resume it with as many, found " + std::to_string(ranks));
  SourceState mine;
  mine.note = parts[static_cast<std::size_t>(rank)];
  const std::string prefix = "r" + std::to_string(rank) + ".";
  for (const auto& [name, tensor] : state.tensors)
    if (name.rfind(prefix, 0) == 0) mine.tensors.emplace_back(name.substr(prefix.size()), tensor);
  return mine;
}

}  // namespace ctune::train
