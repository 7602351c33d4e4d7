// objective.name distill as a kind (train/objective/kind.h): its keys into DistillOptions, its
// teacher (built by the plan, train/run/run_plan.h build_teacher), its loss (distill.h) and its
// batches (distill_source.h). Evaluation scores the eval split's own completions (supervised KD's
// divergence), fixed batches as for SFT. docs/objectives.md#distillation.
#include "core/error.h"
#include "train/objective/distill.h"
#include "train/objective/distill_source.h"

namespace ctune::train {
namespace {

std::shared_ptr<const KindOptions> parse(const Recipe& r) {
  auto o = std::make_shared<DistillOptions>();
  if (r.is_null("objective.teacher.path"))
    r.fail("objective.teacher.path", "objective.name distill needs a teacher: a model directory (config.json, safetensors, tokenizer)");
  o->teacher.path = r.get_string("objective.teacher.path");
  o->teacher.dtype = r.get_optional_string("objective.teacher.dtype").value_or(o->teacher.dtype);
  o->teacher.quantize = r.get_optional_string("objective.teacher.quantize").value_or(o->teacher.quantize);
  o->beta = r.get_optional_float("objective.beta").value_or(o->beta);
  if (o->beta < 0 || o->beta > 1)
    r.fail("objective.beta", "expected a number in [0, 1] for objective.name distill (0 forward KL, 1 reverse KL), found " + std::to_string(o->beta));
  o->lmbda = r.get_optional_float("objective.lmbda").value_or(o->lmbda);
  o->seq_kd = !r.is_null("objective.seq_kd") && r.get_bool("objective.seq_kd");
  o->temperature = r.get_optional_float("objective.temperature").value_or(o->temperature);
  o->top_p = r.get_optional_float("objective.top_p").value_or(o->top_p);
  o->top_k = r.get_optional_int("objective.top_k").value_or(o->top_k);
  o->max_new_tokens = r.get_optional_int("objective.max_new_tokens").value_or(o->max_new_tokens);
  if (!r.is_null("objective.stop")) o->stop = r.get_strings("objective.stop");
  const bool samples = o->lmbda > 0 || o->seq_kd;
  if (samples && r.get_string("data.format") == "text")
    r.fail("data.format", "objective.name distill samples completions of the examples' prompts (objective.lmbda " + summary_number(o->lmbda) +
                              (o->seq_kd ? ", seq_kd" : "") + "), and text examples have none: use instruct or chat data, or lmbda 0");
  if (r.get_bool("data.packing"))
    r.fail("data.packing", "objective.name distill scores each example on its own row (its completion may be sampled anew): set data.packing: false");
  return o;
}

const DistillOptions& own(const KindOptions& options) { return dynamic_cast<const DistillOptions&>(options); }

std::shared_ptr<Objective> make(const KindOptions& options, ObjectiveContext c) {
  return std::make_shared<DistillObjective>(own(options), std::move(c.teacher));
}

std::string summary(const KindOptions& options) {
  const DistillOptions& o = own(options);
  return "teacher " + o.teacher.path + ", beta " + summary_number(o.beta) + ", lmbda " + summary_number(o.lmbda) + (o.seq_kd ? ", seq_kd" : "");
}

// A micro-batch's rows are one completion each, sampled up to max_new_tokens; nothing is kept beside them.
Generation generation(const KindOptions& options) { return {1, own(options).max_new_tokens, 0, "never", /*per_micro_batch=*/true}; }

std::unique_ptr<BatchSource> batch_source(const KindOptions& options, const SourceContext& c) {
  DistillSourceOptions s;
  s.objective = own(options);
  s.grad_accum = c.grad_accum;
  s.seed = c.seed;
  s.stop_ids = c.stop_ids;
  s.pad_id = c.pad_id;
  s.device = c.device;
  s.first_step = c.resumed ? c.first_step : 0;
  s.rank = c.rank, s.ranks = c.ranks;
  s.with_whole_model = c.with_whole_model;
  return std::make_unique<DistillSource>(c.policy, c.teacher, *c.sampler, c.datasets->train, *c.tokenizer, std::move(s));
}

const TeacherOptions* teacher(const KindOptions& options) { return &own(options).teacher; }

}  // namespace

const ObjectiveKind& distill_kind() {
  static const ObjectiveKind kind{"distill", ObjectiveData::examples, parse,   make,    nullptr, nullptr,
                                  summary,   generation,             batch_source, nullptr, nullptr, nullptr,
                                  nullptr,   /*gradient_rows_per_record=*/0, teacher};
  return kind;
}

}  // namespace ctune::train
