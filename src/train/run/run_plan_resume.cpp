// check_resume_compatible (run_plan.h): which recipe changes keep a resumed run the same run.
// Here, beside plan_run, because it compares recipes key by key through the schema.
#include <algorithm>

#include "core/error.h"
#include "core/recipe_schema.h"
#include "train/run/run_plan.h"

namespace ctune::train {

std::vector<std::string> check_resume_compatible(const RunPlan& plan, const std::string& saved_yaml,
                                                 const std::string& where, std::int64_t step, bool inputs_by_identity,
                                                 std::int64_t saved_global_rows) {
  const Recipe saved = Recipe::parse(saved_yaml, where);
  const Recipe& now = plan.recipe;
  // A schedule that decays over the run's length: a new length would bend the curve the
  // checkpoint's steps were taken on.
  const bool length_shapes_schedule = now.get_string("scheduler.name") != "constant";
  std::vector<std::string> notes;
  for (const auto& spec : recipe_schema()) {
    const std::string& before = saved.value_text(spec.key);
    const std::string& after = now.value_text(spec.key);
    if (before == after) continue;
    const bool input = std::any_of(plan.inputs.begin(), plan.inputs.end(), [&](const auto& in) { return in.first == spec.key; });
    if (inputs_by_identity && (input || spec.key == "tokenizer.path")) continue;
    if ((spec.key == "training.max_steps" || spec.key == "training.epochs") && length_shapes_schedule) {
      throw ConfigError(now.origin(spec.key) + ": `" + spec.key + "` differs from the checkpoint's recipe (checkpoint: " + before +
                        ", now: " + after + "); the " + now.get_string("scheduler.name") +
                        " schedule decays over the run's length, so the resumed steps would follow another learning-rate "
                        "curve (to train longer, start a new run from the result, or use scheduler.name: constant)");
    }
    if (spec.key == "training.batch_size" && plan.data.batch_size * plan.world.size == saved_global_rows) {
      notes.push_back("`training.batch_size` changed from " + before + " to " + after + " on " + std::to_string(plan.world.size) +
                      " ranks: the global batch stays " + std::to_string(saved_global_rows) + " rows");
      continue;
    }
    if (!spec.resumable) {  // the schema says which keys may change (KeySpec::resumable)
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
