// check_resume_compatible (run_plan.h): which recipe changes keep a resumed run the same run.
// Here, beside plan_run, because it compares recipes key by key through the schema.
#include <set>

#include "core/error.h"
#include "core/recipe_schema.h"
#include "train/run_plan.h"

namespace ctune::train {

std::vector<std::string> check_resume_compatible(const RunPlan& plan, const std::string& saved_yaml,
                                                 const std::string& where, std::int64_t step) {
  const Recipe saved = Recipe::parse(saved_yaml, where);
  const Recipe& now = plan.recipe;
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

}  // namespace ctune::train
