// An objective as a kind (docs/objectives.md#adding-an-objective), in the manner of a model
// family (model/family.h): one entry per objective.name says what data the objective reads, how
// it reads its own options from the recipe (the keys the schema gives it, KeySpec::objectives in
// core/recipe_schema.h, over the defaults its options struct holds), how it makes its Objective
// (train/step/objective.h), whether it compares the policy with a frozen reference, where its
// batches come from when not from the data, and its summary line. plan_run and the Session ask
// the entry, never the name. Each objective is one file in train/objective/ and one line of the
// registry (train/objective/registry.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/recipe.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"
#include "train/objective/reference_table.h"
#include "train/step/objective.h"
#include "train/step/trainer.h"

namespace ctune::train {

// What an objective learns from (data.format).
enum class ObjectiveData {
  examples,  // instruct, chat, text: the examples' trained tokens
  pairs,     // preference: a chosen and a rejected response of one prompt
  unpaired,  // unpaired_preference: one labelled completion of a prompt, and its KL row
  prompts,   // prompt: prompts whose completions the objective samples itself
};

// An objective's own options: each kind's struct derives from this one (DpoOptions in dpo.h,
// GrpoOptions in grpo.h, ...) and holds its defaults, written there once.
struct KindOptions {
  virtual ~KindOptions() = default;
};

// An objective that samples its own training rows: what one prompt becomes, for the memory
// ledger and the rows a record gives (train/run/run_plan.cpp).
struct Generation {
  std::int64_t group = 1;             // completions sampled per prompt
  std::int64_t new_tokens = 0;        // the longest completion
  std::int64_t kept_logps = 0;        // per-token log-probabilities kept beside each row (old policy, reference)
  std::string share_prompt = "auto";  // train/objective/shared_prompt.h
  // Sampled at each micro-batch and trained at once (distill), not a whole step's prompts
  // before its first forward with the batches kept through the step (grpo).
  bool per_micro_batch = false;
};

// A frozen model of its own an objective learns from (distill's teacher): where its weights are
// and how to hold them. The plan builds it (train/run/run_plan.h build_teacher) with the run's
// compute dtype and device, after checking that it reads the run's tokens.
struct TeacherOptions {
  std::string path;             // a Hugging Face model directory (config.json, safetensors, tokenizer)
  std::string dtype;            // its weights' storage dtype; "": the run's model.dtype
  std::string quantize = "none";  // none | int8 | nf4: its projections quantised
};

// What an objective is made with besides its options.
struct ObjectiveContext {
  bool chunked = true;                          // memory.chunked_loss
  model::CausalLM reference{nullptr};           // the frozen reference; null under LoRA (adapters off) or when none
  std::shared_ptr<const ReferenceTable> table;  // the reference's precomputed log-probabilities; null: none
  model::CausalLM teacher{nullptr};             // the kind's teacher (ObjectiveKind::teacher); null: none
};

// What an objective's own batch and eval sources draw on; the session fills it.
struct SourceContext {
  model::CausalLM policy{nullptr};
  model::CausalLM reference{nullptr};           // as ObjectiveContext::reference
  model::CausalLM teacher{nullptr};             // as ObjectiveContext::teacher
  data::Sampler* sampler = nullptr;             // the training split in the run's order
  const data::Datasets* datasets = nullptr;
  const tok::Tokenizer* tokenizer = nullptr;
  data::SamplerOptions sampler_options;         // the training sampler's (the eval split is batched alike)
  std::int64_t eval_batches = -1;               // training.eval_batches (-1: the whole split)
  std::int64_t grad_accum = 1;
  std::uint64_t seed = 0;
  std::int64_t pad_id = 0;
  at::Device device = at::kCPU;
  int rank = 0, ranks = 1;
  StepSync* sync = nullptr;                     // sums over the ranks (null: one process)
  // Runs its argument with the policy whole (full_shard gathers it once for the whole call).
  std::function<void(const std::function<void()>&)> with_whole_model;
  std::vector<std::int64_t> stop_ids;           // eos and the chat format's end of turn
  // Resuming: the checkpoint's step and what its batch source held (null: not resuming);
  // rank_part takes this rank's share of that (FormatError when the ranks differ from the writer's).
  std::int64_t first_step = 0;
  const SourceState* resumed = nullptr;
  std::function<SourceState(const SourceState&)> rank_part;
};

struct ObjectiveKind {
  std::string name;                               // objective.name
  ObjectiveData data = ObjectiveData::examples;   // what it learns from
  // Its options from the recipe (the keys the schema gives it; an absent key keeps the struct's
  // default), each checked with Recipe::fail. Null: it has none.
  std::shared_ptr<const KindOptions> (*parse)(const Recipe& recipe) = nullptr;
  std::shared_ptr<Objective> (*make)(const KindOptions& options, ObjectiveContext context) = nullptr;
  // Whether it compares the policy with a frozen reference; null: never.
  bool (*reference)(const KindOptions& options) = nullptr;
  // Whether that reference's log-probabilities are computed once, before training; null: never.
  bool (*precomputed_reference)(const KindOptions& options) = nullptr;
  // Its settings for the plan's summary line ("sigmoid, beta 0.1"); null: no line.
  std::string (*summary)(const KindOptions& options) = nullptr;
  // Set for an objective that samples its own training rows: their shape.
  Generation (*generation)(const KindOptions& options) = nullptr;
  // Its training batches when not the data's rows; null: the data's rows.
  std::unique_ptr<BatchSource> (*batch_source)(const KindOptions& options, const SourceContext& context) = nullptr;
  // The latest step's first `groups` prompts with what batch_source's source made of them, for
  // logging.samples_every_n_steps (grpo: completions and rewards); null: nothing to show.
  Json (*samples)(const BatchSource& source, std::int64_t groups) = nullptr;
  // Set when it makes its eval batches anew at each evaluation (null from the call: no eval
  // split); null: the eval split's fixed batches.
  std::unique_ptr<EvalSource> (*eval_source)(const KindOptions& options, const SourceContext& context) = nullptr;
  // Checks the loaded records before anything trains (ConfigError); null: nothing to check.
  void (*check_records)(const KindOptions& options, const data::Datasets& datasets) = nullptr;
  // The programs it runs beside itself, as checkpoints record them ({key: identity}); null: none.
  Json (*programs)(const KindOptions& options) = nullptr;
  // Of the rows a record gives (data::examples_per_record), those whose activations the training
  // forward keeps for backward: the memory ledger's rows. 0: every row. kto: 1 (its KL row is
  // scored without gradients, as the reference's forward is).
  std::int64_t gradient_rows_per_record = 0;
  // Set for an objective that learns from a teacher of its own: where it is; null: none.
  const TeacherOptions* (*teacher)(const KindOptions& options) = nullptr;
};

// A recipe's objective (RunPlan::objective): its kind and that kind's own options. Its
// constructors look the name up in the registry (registry.cpp).
struct ObjectiveOptions {
  ObjectiveOptions();  // sft
  // ConfigError naming every objective for an unknown name; `own` null: a kind without options.
  ObjectiveOptions(const std::string& name, std::shared_ptr<const KindOptions> own);

  const ObjectiveKind* kind;
  std::shared_ptr<const KindOptions> own;

  const std::string& name() const { return kind->name; }
  bool needs_reference() const { return kind->reference && kind->reference(*own); }
  bool precomputes_reference() const { return kind->precomputed_reference && kind->precomputed_reference(*own); }
  std::optional<Generation> generation() const;
  const TeacherOptions* teacher() const { return kind->teacher ? kind->teacher(*own) : nullptr; }
};

// objective.beta for the objectives that need it positive: the recipe's value, or `fallback`.
double positive_beta(const Recipe& recipe, const std::string& objective, double fallback);
// A number as the plan's summary writes it (an ostream's default format: 0.1, 1e-05).
std::string summary_number(double value);

}  // namespace ctune::train
