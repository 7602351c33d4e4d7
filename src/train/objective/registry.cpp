// The registry: one line per objective (train/objective/kind.h). Adding an objective adds its
// file and its line here (docs/objectives.md#adding-an-objective).
#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "core/recipe_schema.h"
#include "train/objective/objectives.h"

namespace ctune::train {

// Each defined in its objective's file.
const ObjectiveKind& sft_kind();
const ObjectiveKind& dpo_kind();
const ObjectiveKind& simpo_kind();
const ObjectiveKind& orpo_kind();
const ObjectiveKind& kto_kind();
const ObjectiveKind& grpo_kind();
const ObjectiveKind& rloo_kind();  // beside grpo_kind, in grpo_kind.cpp
const ObjectiveKind& distill_kind();

namespace {

// The schema lives in core, which knows no objectives, so it spells their names too:
// objective.name's allowed values and each key's KeySpec::objectives. A name in one and not in
// the other is a mistake of the build, caught at the first use.
void check_against_schema(const std::vector<const ObjectiveKind*>& kinds) {
  std::vector<std::string> names;
  for (const ObjectiveKind* k : kinds) names.push_back(k->name);
  const KeySpec* spec = find_key_spec("objective.name");
  if (!spec || spec->allowed != names)
    throw std::logic_error("objective.name's allowed values (core/recipe_schema.cpp) are not the objective registry's names");
  for (const KeySpec& key : recipe_schema())
    for (const std::string& owner : key.objectives)
      if (std::find(names.begin(), names.end(), owner) == names.end())
        throw std::logic_error(key.key + " belongs to objective " + owner + ", which the objective registry does not list");
}

// "a, b or c" of the kinds `keep` accepts, in registry order.
template <typename Keep>
std::string listed(Keep keep) {
  std::vector<std::string> names;
  for (const ObjectiveKind* k : all_objective_kinds())
    if (keep(*k)) names.push_back(k->name);
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

}  // namespace

const std::vector<const ObjectiveKind*>& all_objective_kinds() {
  static const std::vector<const ObjectiveKind*> all = [] {
    std::vector<const ObjectiveKind*> kinds = {
        &sft_kind(),
        &dpo_kind(),
        &simpo_kind(),
        &orpo_kind(),
        &kto_kind(),
        &grpo_kind(),
        &rloo_kind(),
        &distill_kind(),
    };
    check_against_schema(kinds);
    return kinds;
  }();
  return all;
}

const ObjectiveKind& objective_kind(const std::string& name) {
  for (const ObjectiveKind* k : all_objective_kinds())
    if (k->name == name) return *k;
  throw ConfigError("objective.name: expected " + listed([](const ObjectiveKind&) { return true; }) + ", found " + name);
}

std::string objective_names(ObjectiveData data) {
  return listed([data](const ObjectiveKind& k) { return k.data == data; });
}

ObjectiveOptions::ObjectiveOptions() : ObjectiveOptions("sft", nullptr) {}

ObjectiveOptions::ObjectiveOptions(const std::string& name, std::shared_ptr<const KindOptions> own)
    : kind(&objective_kind(name)), own(own ? std::move(own) : std::make_shared<const KindOptions>()) {}

std::shared_ptr<Objective> make_objective(const ObjectiveOptions& options, bool chunked, model::CausalLM reference,
                                          std::shared_ptr<const ReferenceTable> table, model::CausalLM teacher) {
  return options.kind->make(*options.own, {chunked, std::move(reference), std::move(table), std::move(teacher)});
}

}  // namespace ctune::train
