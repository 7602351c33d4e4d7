#include "train/resume.h"

#include <fstream>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "core/recipe_schema.h"
#include "io/file.h"

namespace ctune::train {
namespace fs = std::filesystem;

std::vector<std::string> check_resume_compatible(const Recipe& saved, const Recipe& now, std::int64_t step) {
  // Keys that change how a run is observed or how long it goes on, not what it computes.
  static const std::set<std::string> harmless = {
      "output_dir",         "threads",           "logging.every_n_steps", "training.eval_every",
      "training.eval_batches", "checkpoint.every_n_steps", "checkpoint.keep_last", "data.eval",
      "training.max_steps", "training.epochs", "training.max_nonfinite_steps"};
  std::vector<std::string> notes;
  for (const auto& spec : recipe_schema()) {
    const std::string& before = saved.value_text(spec.key);
    const std::string& after = now.value_text(spec.key);
    if (before == after) continue;
    if (!harmless.count(spec.key)) {
      throw ConfigError(now.origin(spec.key) + ": `" + spec.key + "` differs from the checkpoint's recipe (checkpoint: " +
                        before + ", now: " + after + "); a resumed run must compute the same thing (start a new run instead)");
    }
    if (spec.key == "training.max_steps" && !now.is_null(spec.key) && now.get_int(spec.key) < step) {
      throw ConfigError(now.origin(spec.key) + ": `training.max_steps` " + after + " is before the checkpoint's step " +
                        std::to_string(step));
    }
    notes.push_back("`" + spec.key + "` changed from " + before + " to " + after);
  }
  return notes;
}

void truncate_metrics(const fs::path& dir, std::int64_t step) {
  const fs::path path = dir / "metrics.jsonl";
  std::ifstream in(path);
  if (!in) return;
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    Json j;
    try {
      j = Json::parse(line);
    } catch (const Json::parse_error&) {
      break;  // a line cut short by the kill: nothing after it can be trusted
    }
    if (!j.contains("step") || j["step"].get<std::int64_t>() > step) continue;
    kept += line + "\n";
  }
  io::write_file_atomic(path, kept);
}

}  // namespace ctune::train
