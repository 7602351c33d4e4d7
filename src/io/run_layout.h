// The run directory (output_dir): every name a run writes there, in one place. The session, the
// metrics and event writers, checkpoints, the run guards and the report all take them from here
// (docs/report.md and docs/recipes.md describe the files).
//
//   output_dir/
//     .ctune-run          the run marker: this is a ctune run; its resume records
//     .ctune.lock         held by the one process writing the run (io::DirLock)
//     recipe.yaml         the resolved recipe (a checkpoint holds its own copy)
//     metrics.jsonl       one JSON object per step, per evaluation, and the memory record
//     tb/                 TensorBoard event files
//     train.log           the log
//     report.html         the run report
//     profile.trace.json  logging.profile: two steps as a Chrome trace (Perfetto)
//     reference_logps.safetensors  objective.precompute_reference: the reference's log-probabilities
//     checkpoints/step_NNNNNNNN/
//     model/ or adapter/  the result (core/method_names.h: the method's result_dir)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/method_names.h"

namespace ctune::io {

inline constexpr const char* kRunMarker = ".ctune-run";
inline constexpr const char* kLockFile = ".ctune.lock";
inline constexpr const char* kRecipeFile = "recipe.yaml";
inline constexpr const char* kMetricsFile = "metrics.jsonl";
inline constexpr const char* kEventsDir = "tb";
inline constexpr const char* kTrainLog = "train.log";
inline constexpr const char* kReportFile = "report.html";
inline constexpr const char* kCheckpointsDir = "checkpoints";
inline constexpr const char* kProfileTrace = "profile.trace.json";  // logging.profile
inline constexpr const char* kReferenceLogps = "reference_logps.safetensors";  // objective.precompute_reference
inline constexpr const char* kSamplesFile = "samples.jsonl";  // grpo: logging.samples_every_n_steps

// output_dir/checkpoints/step_NNNNNNNN (eight digits, so names sort by step).
std::filesystem::path checkpoint_dir(const std::filesystem::path& output_dir, std::int64_t step);
// The step of a checkpoint directory's name; -1 when the name is not step_NNNNNNNN.
std::int64_t checkpoint_step(const std::filesystem::path& dir);
// output_dir/model or output_dir/adapter.
std::filesystem::path result_dir(const std::filesystem::path& output_dir, MethodKind method);
// What a fresh run (or --overwrite) clears from an earlier run: every output but the marker
// and the lock.
std::vector<std::string> run_outputs();

}  // namespace ctune::io
