// The memory ledger of a training run, predicted before anything is allocated: weights,
// gradients, optimizer state, activations saved for backward, logits and loss buffers, KV cache
// and runtime, each with the formula behind it, and the peak they add up to. The activation
// terms count what this implementation's autograd graph keeps per decoder layer (Llama's SwiGLU
// MLP and grouped-query attention; adapted from Korthikanti et al.'s per-layer accounting in
// docs/formats.md#memory-formulas), so they change with precision, LoRA targets, dropout and recompute
// mode exactly as the code does. `ctune estimate` prints it; `ctune train` logs it against the
// measured peak.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "core/term.h"
#include "model/config.h"
#include "model/parameter_shapes.h"
#include "model/recompute.h"
#include "quant/quantized_linear.h"
#include "train/method/method.h"

namespace ctune::train {

// A frozen copy of the model: all its bytes, and those of its quantised projections.
struct FrozenCopyBytes {
  std::int64_t total = 0, quantised = 0;
};

struct LedgerInputs {
  model::ModelConfig config;
  std::vector<model::ParameterShape> parameters;  // of the shape-only model (model/parameter_shapes.h)
  std::shared_ptr<const Method> method;       // what trains, per module
  at::ScalarType storage_dtype = at::kFloat;  // weights as stored (fp32 masters when they train)
  at::ScalarType compute_dtype = at::kFloat;  // matmuls (precision)
  std::optional<quant::QuantSpec> quantize_base;
  model::RecomputePolicy recompute;
  bool chunked_loss = true;
  bool router_z_loss = false;  // moe.router_z_loss_coef > 0: each router keeps its logits
  std::int64_t batch_size = 1;  // rows per micro-batch (a preference pair is two)
  // The longest row a batch can hold: data.max_seq_len when packing (rows are filled to it);
  // unpacked rows are padded to the batch's longest, so the data's longest row when it is known.
  std::int64_t seq_len = 512;
  bool seq_len_from_data = false;
  std::int64_t grad_accum = 1;
  std::string optimizer = "adamw";  // adamw | sgd
  std::int64_t optimizer_shards = 1;  // ranks sharing gradients and optimizer state (sharded strategies)
  std::int64_t parameter_shards = 1;  // ranks sharing the parameters (full_shard, hybrid_shard)
  bool cpu_offload = false;           // shards, their gradients and optimizer state in host memory
  // no_shard over several ranks: the gradients are all-reduced as one flat fp32 copy
  // (train/parallel/replicated_sync.cpp), beside them for the collective's length.
  bool all_reduced_gradients = false;
  // The optimizer step runs the fused CPU kernels (ops/fused_optimizer.h: the model on the CPU,
  // or its shards offloaded there): no temporaries; else ATen's (a float64 copy of the largest
  // gradient for the norm, the update's intermediates).
  bool fused_optimizer = true;
  bool sharded_checkpoints = false;   // checkpoint.layout sharded: each rank writes its part, nothing is gathered
  bool prefetch = false;              // full_shard: the next part gathered while one computes
  double momentum = 0.9;
  std::int64_t runtime_bytes = 0;  // the process before training: libraries, tokenizer, data
  std::int64_t step_runtime_bytes = 0;  // what a step adds outside its tensors (ops::step_runtime_bytes)
  // Compiled GEMM kernels the step adds outside the tensor pool (ops::gemm_kernel_cache_bytes):
  // counted for models with experts, whose routed row counts change every step.
  std::int64_t kernel_cache_bytes = 0;
  bool padded_expert_rows = false;  // routed row counts padded (model/moe.h pads_expert_rows)
  // 16-bit products computed in fp32 from their rounded operands (ops/compute.h gemm_in_fp32: a
  // CPU without a 16-bit GEMM): each GEMM's fp32 copies are a workspace beside the step's tensors.
  bool gemm_in_fp32 = false;
  // bf16 weight gradients can be written in fp32 by the GEMM (ops/cpu_gemm.h fp32_weight_grads):
  // the head's has no bf16 share beside its accumulator.
  bool fp32_weight_grads = false;
  // The blocked attention runs tiled (ops/attention_tiled.h tiled_attention_applies), with one
  // scratch set of tiles per thread.
  bool tiled_attention = false;
  // The Gated DeltaNet's rule runs as its per-head CPU kernel (ops/gated_delta.h
  // gated_delta_kernel_applies), with one scratch per thread.
  bool gated_delta_kernel = false;
  std::int64_t threads = 1;
  // A preference objective under full fine-tuning: the frozen reference copy's weights (LoRA's
  // reference is the policy with its adapters off: 0), sharded as the policy's are; its
  // quantised projections (objective.reference_quantize) are not sharded, as a quantised base's.
  FrozenCopyBytes reference;
  // A distilling objective's teacher (objective.teacher): its weights as stored, whole on every
  // rank (a frozen model of another shape is not sharded as the policy).
  FrozenCopyBytes teacher;
  std::int64_t teacher_hidden = 0, teacher_intermediate = 0;  // its hidden size and MLP width (ModelConfig::mlp_width)
  bool exact_allocator = false;    // memory.allocator: exact (no allocator reserve)
  // An objective that generates (grpo): the sequences one generation samples together
  // (grad_accum x batch_size prompts x num_generations on a rank; 0: none), their new tokens at
  // most (seq_len counts them too), and the per-token log-probability tables kept with the
  // rollout batches (the sampling policy's with num_iterations > 1, the reference's with beta > 0).
  std::int64_t generated_rows = 0;
  std::int64_t new_tokens = 0;
  std::int64_t kept_logps = 0;
  // Generating: the longest prompt, and the training rows the generation batch's steps keep
  // (generated_rows, or one per group when a group's completions share their prompt's row:
  // train/objective/shared_prompt.h, whose rows also keep prefix and sequence ids).
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_prompts = 0;  // distinct prompts: the prompt pass runs once per prompt (infer/generate.h)
  bool tiled_prefill = false;          // the prompt pass's attention runs tiled (ops/attention_tiled.h)
  std::int64_t kept_rows = 0;
  bool shared_prompt = false;
};

// Bytes of a frozen copy of the model stored in `storage` (a preference objective's reference),
// its projections quantised by `quantize` when given.
FrozenCopyBytes frozen_copy_bytes(const std::vector<model::ParameterShape>& parameters, at::ScalarType storage,
                               const std::optional<quant::QuantSpec>& quantize);

struct LedgerLine {
  std::string name;     // "weights", "gradients", ...
  std::int64_t bytes = 0;
  std::string formula;  // how `bytes` was computed: for a training ledger, an expression in the
                        // symbols of Ledger::symbol_values that evaluates to `bytes` (core/term.h)
  std::string note;     // what the formula's parts are, in words
  std::string pool = "device";  // "host" under distributed.cpu_offload (on a CPU build, the same memory)
};

struct Ledger {
  std::vector<LedgerLine> lines;
  std::int64_t peak_bytes = 0;
  std::string peak_formula;
  std::int64_t host_bytes = 0;  // of the peak, the host pool's lines (cpu_offload)
  // Parameters, gradients and optimizer state at their peak (weights, gathered, gradients,
  // gathered grads and optimizer state together): what train/forecast/memory_report.h measures.
  std::int64_t state_bytes = 0;
  std::int64_t activations_per_layer = 0;  // saved per decoder layer without recompute
  // What a checkpoint holds of the state, whole over every rank (train/forecast/disk_need.h): the
  // trainable parameters, each in fp32, and the optimizer's fp32 state, in bytes per parameter.
  std::int64_t trainable_parameters = 0;
  std::int64_t optimizer_bytes_per_parameter = 0;
  // The moment that sets the peak ("the start of backward", ..., "the whole model gathered for
  // the run's result") and what it adds to what is always there; `between_steps`: a gather
  // after an update, which no step-time switch moves.
  std::string peak_moment;
  std::int64_t peak_moment_bytes = 0;
  bool peak_between_steps = false;
  std::string symbols;  // what n, H, I, ... stand for in this run
  std::vector<std::pair<std::string, std::int64_t>> symbol_values;  // their values, for evaluating a formula

  Json to_json() const;
  std::string to_text() const;  // the table `ctune estimate` prints
};

Ledger estimate_memory(const LedgerInputs& in);

// "412.3 MB": how the ledger and what quotes it (the planner, the out-of-memory line) print bytes.
std::string format_mb(std::int64_t bytes);

// Ledger::symbols: "B = 4 (batch rows), T = 512 (sequence), ..." for each of `values` in order,
// with its meaning where `meanings` has one. Each view has its own meanings (P is the ranks
// sharing parameters in training, the prompt's tokens in the generation view).
using SymbolMeanings = std::vector<std::pair<std::string, std::string>>;
std::string symbol_table(const std::vector<std::pair<std::string, std::int64_t>>& values, const SymbolMeanings& meanings);

// The generation view: `ctune generate` on `batch` prompts of `prompt_tokens` each (the longest,
// as they are left-padded to it) with up to `new_tokens` more, weights stored and computed in
// `storage_dtype`: weights, the KV cache, the prompt pass's transient (generation_ledger.cpp).
struct GenerationLedgerInputs {
  model::ModelConfig config;
  std::int64_t parameters = 0;  // model::parameter_count of the model
  at::ScalarType storage_dtype = at::kFloat;
  std::int64_t batch = 1, prompt_tokens = 512, new_tokens = 256;
  std::int64_t threads = 1;  // generate's threads: the tiled attention keeps one tile per thread
};
Ledger estimate_generation_memory(const GenerationLedgerInputs& in);

// The prompts' forward pass, the largest transient of a generation: what the generation view's
// `prefill` line and GRPO's `generation prefill` both count (generation_ledger.cpp). `prompts`
// rows of P tokens run the pass (a distinct prompt once); the last position's fp32 logits of
// `logit_rows` sequences follow it. `tiled`: the attention runs tiled (ops/attention_tiled.h),
// one tile per thread of `threads`.
struct PromptPass {
  Term prompts, logit_rows, P, H, I, V, nh, nkv, d, c, threads;
  bool tiled = false;
};
Term prompt_pass_bytes(const PromptPass& p);
// What prompt_pass_bytes counts, in words, for a ledger line's note.
std::string prompt_pass_note(const PromptPass& p);

}  // namespace ctune::train
