// objective.name grpo and rloo as kinds (train/objective/kind.h): their keys (objective.* and reward.*)
// into GrpoOptions, its loss (grpo.h), and its batches: completions it samples of the prompts
// (rollout.h), for training and, anew at each evaluation, for the eval split (rollout_eval.h).
// docs/objectives.md#grpo.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "train/objective/grpo.h"
#include "train/objective/reward_command.h"
#include "train/objective/rewards.h"
#include "train/objective/rollout.h"
#include "train/objective/rollout_eval.h"

namespace ctune::train {
namespace {

// reward.<name>: {field, weight, ...} with every key known and of its type.
RewardSpec reward_spec(const Recipe& r, const std::string& name) {
  const std::string key = "reward." + name;
  const OrderedJson map = r.get_map(key);
  RewardSpec spec;
  spec.name = name;
  const std::vector<std::string> known = name == "format"   ? std::vector<std::string>{"pattern", "weight"}
                                         : name == "length" ? std::vector<std::string>{"max_tokens", "cache", "weight"}
                                         : name == "numeric" ? std::vector<std::string>{"field", "tolerance", "weight"}
                                                             : std::vector<std::string>{"field", "weight"};
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      r.fail(key, "unknown setting \"" + it.key() + "\" (expected " + list + ")");
    }
    const bool text = it.key() == "field" || it.key() == "pattern";
    if (text ? !it->is_string() : !it->is_number())
      r.fail(key, "\"" + it.key() + "\" expected " + (text ? "a string" : "a number") + ", found " + json_type_name(*it));
  }
  spec.field = map.value("field", spec.field);
  spec.pattern = map.value("pattern", spec.pattern);
  spec.weight = map.value("weight", spec.weight);
  spec.tolerance = map.value("tolerance", spec.tolerance);
  spec.max_tokens = map.value("max_tokens", spec.max_tokens);
  spec.cache = map.value("cache", spec.cache);
  if (!std::isfinite(spec.weight)) r.fail(key, "\"weight\" must be finite");
  return spec;
}

// reward.*: the built-in functions in reward_names() order, then the program.
void read_rewards(const Recipe& r, GrpoOptions& o) {
  for (const auto& name : reward_names())
    if (!r.is_null("reward." + name)) o.rewards.push_back(reward_spec(r, name));
  if (!r.is_null("reward.command")) {
    RewardSpec spec;
    spec.name = "command";
    spec.command = r.get_strings("reward.command");
    spec.weight = r.get_optional_float("reward.command_weight").value_or(spec.weight);
    spec.timeout_s = r.get_optional_float("reward.timeout_s").value_or(spec.timeout_s);
    spec.on_error = r.get_optional_string("reward.on_error").value_or(spec.on_error);
    o.rewards.push_back(std::move(spec));
  }
  for (const char* key : {"reward.command_weight", "reward.timeout_s", "reward.on_error"})
    if (!r.is_null(key) && r.is_null("reward.command")) r.fail(key, "applies to reward.command, which this recipe does not set");
  if (o.rewards.empty())
    r.fail("reward.exact", "grpo needs at least one reward function (reward.exact, contains, regex, numeric, format, length or command)");
  make_rewards(o.rewards, o.max_new_tokens);  // settings checked now, before any file is read
}

// Whether `former` or `now` is set; both set is refused. Keys renamed to TRL's names keep their
// former names, so recipes and checkpoints written before still read (docs/objectives.md#grpo).
bool former_name(const Recipe& r, const std::string& former, const std::string& now) {
  if (!r.is_null(former) && !r.is_null(now)) r.fail(former, "is " + now + "'s former name; set only " + now);
  return !r.is_null(former) || !r.is_null(now);
}

// loss_type (or its former name, aggregation), the importance weights and which tokens train.
void read_loss_options(const Recipe& r, GrpoOptions& o) {
  if (former_name(r, "objective.aggregation", "objective.loss_type")) {
    if (r.is_null("objective.aggregation")) {
      o.loss_type = r.get_string("objective.loss_type");
    } else {
      const std::string a = r.get_string("objective.aggregation");
      o.loss_type = a == "sequence" ? "grpo" : a == "fixed" ? "dr_grpo" : "dapo";
    }
  }
  if (!is_grpo_loss_type(o.loss_type))
    r.fail("objective.loss_type", "objective.name grpo expects grpo, bnpo, dr_grpo, dapo or cispo, found " + o.loss_type);
  o.importance_sampling_level = r.get_optional_string("objective.importance_sampling_level").value_or(o.importance_sampling_level);
  o.delta = r.get_optional_float("objective.delta").value_or(o.delta);
  o.top_entropy_quantile = r.get_optional_float("objective.top_entropy_quantile").value_or(o.top_entropy_quantile);
  o.entropy_coef = r.get_optional_float("objective.entropy_coef").value_or(o.entropy_coef);
  o.multi_objective_aggregation = r.get_optional_string("objective.multi_objective_aggregation").value_or(o.multi_objective_aggregation);
  // TRL would cap cispo's weights at epsilon (0.2) when epsilon_high is unset: a weight of at most
  // 0.2 on every token, never what a user means; ctune asks for the cap.
  if (o.loss_type == "cispo" && r.is_null("objective.epsilon_high"))
    r.fail("objective.loss_type", "cispo caps the importance weights at objective.epsilon_high (ScaleRL's epsilon_max; 5 in its paper), which is not set");
  if (o.loss_type == "cispo" && !r.is_null("objective.delta"))
    r.fail("objective.delta", "applies to the clipped loss types (grpo, bnpo, dr_grpo, dapo), found loss_type cispo");
}

// The keys GRPO and RLOO share: sampling, clipping, passes, the trained completions, rewards.
void read_shared(const Recipe& r, GrpoOptions& o) {
  o.beta = r.get_optional_float("objective.beta").value_or(o.beta);
  o.num_generations = r.get_optional_int("objective.num_generations").value_or(o.num_generations);
  o.temperature = r.get_optional_float("objective.temperature").value_or(o.temperature);
  o.top_p = r.get_optional_float("objective.top_p").value_or(o.top_p);
  o.top_k = r.get_optional_int("objective.top_k").value_or(o.top_k);
  o.max_new_tokens = r.get_optional_int("objective.max_new_tokens").value_or(o.max_new_tokens);
  if (!r.is_null("objective.stop")) o.stop = r.get_strings("objective.stop");
  o.epsilon = r.get_optional_float("objective.epsilon").value_or(o.epsilon);
  o.epsilon_high = r.get_optional_float("objective.epsilon_high").value_or(o.epsilon_high);
  o.num_iterations = r.get_optional_int("objective.num_iterations").value_or(o.num_iterations);
  if (former_name(r, "objective.mask_truncated", "objective.mask_truncated_completions"))
    o.mask_truncated_completions = r.get_bool(r.is_null("objective.mask_truncated") ? "objective.mask_truncated_completions" : "objective.mask_truncated");
  o.share_prompt = r.get_optional_string("objective.share_prompt").value_or(o.share_prompt);
  if (o.num_generations < 2) {
    r.fail("objective.num_generations", "expected at least 2, found " + std::to_string(o.num_generations) +
                                            ": a group of one has its own reward as the baseline, so every advantage is 0");
  }
  if (o.epsilon_high > 0 && o.epsilon_high < o.epsilon)
    r.fail("objective.epsilon_high", "expected at least objective.epsilon (" + std::to_string(o.epsilon) + "), found " + std::to_string(o.epsilon_high));
  read_rewards(r, o);
}

std::shared_ptr<const KindOptions> parse(const Recipe& r) {
  auto o = std::make_shared<GrpoOptions>();
  o->scale_rewards = r.get_optional_string("objective.scale_rewards").value_or(o->scale_rewards);
  read_loss_options(r, *o);
  read_shared(r, *o);
  return o;
}

// objective.name rloo: TRL 1.9's RLOOConfig defaults (beta 0.05, num_generations 2).
std::shared_ptr<const KindOptions> parse_rloo(const Recipe& r) {
  auto o = std::make_shared<GrpoOptions>();
  o->leave_one_out = true;
  o->beta = 0.05;
  o->num_generations = 2;
  o->normalize_advantages = !r.is_null("objective.normalize_advantages") && r.get_bool("objective.normalize_advantages");
  read_shared(r, *o);
  return o;
}

const GrpoOptions& own(const KindOptions& options) { return dynamic_cast<const GrpoOptions&>(options); }

std::shared_ptr<Objective> make(const KindOptions& options, ObjectiveContext /*context*/) {
  return std::make_shared<GrpoObjective>(own(options));
}

bool reference(const KindOptions& options) { return own(options).beta > 0; }

std::string summary(const KindOptions& options) {
  const GrpoOptions& o = own(options);
  if (o.leave_one_out) return std::string("leave-one-out") + (o.normalize_advantages ? ", normalised" : "") + ", beta " + summary_number(o.beta);
  return o.loss_type + (o.importance_sampling_level == "sequence" ? " (sequence weights)" : "") + ", beta " + summary_number(o.beta);
}

Generation generation(const KindOptions& options) {
  const GrpoOptions& o = own(options);
  return {o.num_generations, o.max_new_tokens, (o.num_iterations > 1 || o.leave_one_out ? 1 : 0) + (o.beta > 0 ? 1 : 0), o.share_prompt};
}

// What the rollouts of training and of evaluation share: settings, ranks, stop ids.
RolloutOptions rollout_options(const GrpoOptions& o, const SourceContext& c) {
  RolloutOptions r;
  r.objective = o;
  r.grad_accum = c.grad_accum;
  r.seed = c.seed;
  r.pad_id = c.pad_id;
  r.device = c.device;
  r.rank = c.rank, r.ranks = c.ranks;
  r.sync = c.sync;
  r.with_whole_model = c.with_whole_model;
  r.stop_ids = c.stop_ids;
  return r;
}

// The policy's completions of the sampler's prompts, scored by the reward functions. A run
// resumed inside a generation batch (num_iterations > 1) continues the batch the checkpoint
// holds (under several ranks each rank's own part of it, which needs as many ranks as wrote it).
std::unique_ptr<BatchSource> batch_source(const KindOptions& options, const SourceContext& c) {
  const GrpoOptions& o = own(options);
  const std::int64_t resumed_step = c.resumed ? c.first_step : 0;
  const bool inside = resumed_step % o.num_iterations != 0;
  const std::string where = "--resume: the checkpoint is at step " + std::to_string(resumed_step) +
                            ", inside a generation batch of objective.num_iterations " + std::to_string(o.num_iterations) + " steps";
  if (inside && c.resumed->note.is_null())
    throw ConfigError(where + ", and holds none of its completions; resume from a checkpoint at a multiple of " + std::to_string(o.num_iterations));
  SourceState mine;
  if (inside) {
    try {
      mine = c.rank_part(*c.resumed);
    } catch (const FormatError& e) {
      throw ConfigError(where + ": " + e.what());
    }
  }
  RolloutOptions r = rollout_options(o, c);
  r.first_step = resumed_step;
  auto rollouts = std::make_unique<RolloutSource>(c.policy, c.reference, *c.sampler, c.datasets->train, c.datasets->train_records,
                                                  *c.tokenizer, std::move(r));
  if (inside) rollouts->restore(mine);
  return rollouts;
}

// `source` is batch_source's.
Json samples(const BatchSource& source, std::int64_t groups) { return static_cast<const RolloutSource&>(source).samples(groups); }

// Online RL evaluates on completions of the eval prompts sampled anew at each evaluation.
std::unique_ptr<EvalSource> eval_source(const KindOptions& options, const SourceContext& c) {
  if (!c.datasets->eval || c.datasets->eval->empty()) return nullptr;
  return std::make_unique<RolloutEval>(c.policy, c.reference, c.datasets->eval, c.datasets->eval_records, *c.tokenizer,
                                       rollout_options(own(options), c), c.sampler_options, c.eval_batches);
}

// Every record holds the fields its reward functions read.
void check_records(const KindOptions& options, const data::Datasets& ds) {
  if (!ds.train_records) return;
  const GrpoOptions& o = own(options);
  const auto rewards = make_rewards(o.rewards, o.max_new_tokens);
  check_fields(rewards, *ds.train_records, "data.train");
  if (ds.eval_records && ds.eval_records != ds.train_records) check_fields(rewards, *ds.eval_records, "data.eval");
}

Json programs(const KindOptions& options) {
  Json out = Json::object();
  for (const auto& spec : own(options).rewards)
    if (spec.name == "command") out["reward.command"] = reward_program_identity(spec.command);
  return out;
}

}  // namespace

const ObjectiveKind& grpo_kind() {
  static const ObjectiveKind kind{"grpo",     ObjectiveData::prompts, parse,         make,    reference, nullptr, summary, generation,
                                  batch_source, samples,                eval_source, check_records, programs};
  return kind;
}

// RLOO shares GRPO's batches (rollout.h) and loss (grpo.h, GrpoOptions::leave_one_out).
const ObjectiveKind& rloo_kind() {
  static const ObjectiveKind kind{"rloo",     ObjectiveData::prompts, parse_rloo,    make,    reference, nullptr, summary, generation,
                                  batch_source, samples,                eval_source, check_records, programs};
  return kind;
}

}  // namespace ctune::train
