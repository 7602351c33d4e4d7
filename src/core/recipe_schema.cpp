#include "core/recipe_schema.h"

#include "core/method_names.h"
#include "core/quant_names.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

namespace ctune {

namespace {

// Keys that change how a run is observed, how long it goes on or how the work is shared among
// ranks, not what it computes: --resume accepts a new value for them (train/run/run_plan_resume.cpp).
KeySpec may_change_on_resume(KeySpec spec) {
  spec.resumable = true;
  return spec;
}

std::string check_threads(const std::string& v) {
  if (v == "auto") return "";
  if (!v.empty() && std::all_of(v.begin(), v.end(), ::isdigit) && v.size() < 5 && std::stoi(v) >= 1) return "";
  return "expected \"auto\" or a thread count >= 1";
}

// none | full | selective | every_n:K (K >= 1)
std::string check_checkpointing(const std::string& v) {
  if (v == "none" || v == "full" || v == "selective") return "";
  const std::string prefix = "every_n:";
  if (v.rfind(prefix, 0) == 0) {
    std::string k = v.substr(prefix.size());
    if (!k.empty() && k.size() < 6 && std::all_of(k.begin(), k.end(), ::isdigit) && std::stoi(k) >= 1) return "";
  }
  return "expected none, full, selective or every_n:K with K >= 1";
}


// A key of some objectives only (KeySpec::objectives): plan_run refuses it under any other.
KeySpec owned_by(std::vector<std::string> objectives, KeySpec spec) {
  spec.objectives = std::move(objectives);
  return spec;
}

// A technique the planner may choose: `auto` hands it over (train/plan/planner.h).
KeySpec planned(KeySpec spec) {
  spec.planned = true;
  return spec;
}

// The run, the model and the data.
std::vector<KeySpec> run_and_data_keys() {
  using T = KeyType;
  return {
      may_change_on_resume({"output_dir", T::Path, "null", "Run directory: resolved recipe, metrics.jsonl, train.log, checkpoints", {}, {}, {}, false, true}),
      {"seed", T::Int, "42", "Seed for initialisation, data order and dropout", {}, 0, 9.2e18},
      {"device", T::String, "cpu", "Where the model and batches live: cpu, or cuda (needs a CUDA build of LibTorch)",
       {"cpu", "cuda"}},
      may_change_on_resume({"threads", T::String, "auto", "Intra-op threads: \"auto\" (cores available) or a count", {}, {}, {}, false, false, 0, check_threads}),

      {"model.path", T::Path, "null", "Hugging Face model directory (config.json + safetensors)", {}, {}, {}, false, true},
      {"model.dtype", T::String, "fp32", "Dtype the base weights are loaded in", {"fp32", "bf16", "fp16"}},
      {"tokenizer.path", T::Path, "null", "Directory with tokenizer.json or tokenizer.model (default: model.path)", {}, {}, {}, true},

      {"data.train", T::Path, "null", "Training data: JSONL or a JSON array", {}, {}, {}, false, true},
      may_change_on_resume({"data.eval", T::Path, "null", "Evaluation data (or use data.eval_fraction)", {}, {}, {}, true}),
      {"data.eval_fraction", T::Float, "0.0", "Share of the training data held out for evaluation", {}, 0.0, 0.9},
      {"data.format", T::String, "instruct",
       "Example format (preference: prompt, chosen, rejected pairs for objective.name dpo; unpaired_preference: prompt, completion, label "
       "for kto; prompt: prompts and reward fields for grpo)",
       {"instruct", "chat", "text", "preference", "unpaired_preference", "prompt"}},
      {"data.columns.instruction", T::String, "instruction", "instruct: column holding the instruction"},
      {"data.columns.input", T::String, "input", "instruct: column holding the optional input"},
      {"data.columns.output", T::String, "output", "instruct: column holding the response"},
      {"data.columns.messages", T::String, "messages", "chat: column holding the list of {role, content}"},
      {"data.columns.text", T::String, "text", "text: column holding the document"},
      {"data.columns.prompt", T::String, "prompt", "preference: column holding the prompt (a string or a list of messages)"},
      {"data.columns.chosen", T::String, "chosen", "preference: column holding the preferred response"},
      {"data.columns.rejected", T::String, "rejected", "preference: column holding the other response"},
      {"data.columns.completion", T::String, "completion", "unpaired_preference: column holding the response (a string or a list of messages)"},
      {"data.columns.label", T::String, "label", "unpaired_preference: column holding the response's label, true (desirable) or false"},
      {"data.chat_format", T::String, "auto",
       "Chat rendering: auto (the tokenizer's own chat_template when it has one, else plain), template (that template, "
       "required), or a native renderer",
       {"auto", "template", "llama3", "chatml", "qwen3", "llama2", "plain"}},
      {"data.chat_template", T::String, "null",
       "Which chat template: a name from the tokenizer's list (e.g. tool_use) or a .jinja file; null: default",
       {}, {}, {}, true},
      {"data.template_kwargs", T::Map, "null",
       "Extra chat-template variables, e.g. {enable_thinking: false}", {}, {}, {}, true},
      {"data.columns.tools", T::String, "tools", "chat: column holding the optional list of tool schemas"},
      {"data.instruct_template", T::String, "auto", "instruct rendering (auto: chat when the tokenizer has a chat template)",
       {"auto", "alpaca", "chat"}},
      {"data.train_on_input", T::Bool, "false", "Also train on prompt/user/system tokens"},
      {"data.parse_special_in_content", T::Bool, "false",
       "Map special-token strings inside the data's text (e.g. <|eot_id|>) to their ids, as Hugging Face does; "
       "default: tokenize them as text, so data cannot forge turn boundaries"},
      {"data.max_seq_len", T::Int, "1024", "Longest sequence; longer examples follow data.truncation", {}, 8, 1048576},
      {"data.truncation", T::String, "keep_start",
       "An example (or either sequence of a pair) longer than data.max_seq_len: keep_start (cut its end), keep_end (cut its "
       "start), drop (leave the record out, counted) or error",
       {"keep_start", "keep_end", "drop", "error"}},
      {"data.packing", T::Bool, "false", "Pack short examples into full rows (attention stays within each)"},
      {"data.packing_window", T::Int, "1024",
       "Packing: documents per first-fit-decreasing bin-packing window of the shuffled order (0: pack in order)", {}, 0,
       1000000000},
      {"data.packing_split", T::Bool, "false",
       "Packing: fill every row to the last token; a document that does not fit continues in the next row"},
      {"data.shuffle", T::Bool, "true", "Shuffle training examples each epoch (deterministic from seed)"},
      {"data.on_error", T::String, "error", "A malformed example stops the run, or is skipped and counted", {"error", "skip"}},
      {"data.add_eos", T::Bool, "true", "text format: append the eos token to each document"},
  };
}

// The training method, the optimizer and its schedule.
std::vector<KeySpec> method_keys() {
  using T = KeyType;
  return {
      planned({"peft.method", T::String, "none", "none = full fine-tuning; lora = LoRA adapters on a frozen base", recipe_method_names()}),
      {"peft.rank", T::Int, "8", "LoRA rank r", {}, 1, 4096},
      {"peft.alpha", T::Float, "16.0", "LoRA alpha (scale alpha/r, or alpha/sqrt(r) with rslora)", {}, 1e-9, 1e9},
      {"peft.dropout", T::Float, "0.0", "Dropout on the LoRA input", {}, 0.0, 0.99},
      {"peft.target_modules", T::StringList, "[q_proj, v_proj]",
       "Linear layers that get adapters, by the model's names (all-linear: every one but lm_head)"},
      {"peft.rslora", T::Bool, "false", "Rank-stabilised scale alpha/sqrt(r)"},
      {"peft.train_router", T::Bool, "false",
       "LoRA on a model with experts: the routers train too (fp32, saved with the adapter as PEFT's modules_to_save [gate])"},
      {"peft.init_from", T::Path, "null", "Start from an existing PEFT LoRA adapter directory", {}, {}, {}, true},

      {"optimizer.name", T::String, "adamw", "Optimizer", {"adamw", "sgd"}},
      {"optimizer.lr", T::Float, "2.0e-4", "Peak learning rate", {}, 1e-12, 10.0},
      {"optimizer.weight_decay", T::Float, "0.0", "Decoupled weight decay (AdamW) or L2 (SGD)", {}, 0.0, 10.0},
      {"optimizer.betas", T::FloatList, "[0.9, 0.999]", "AdamW beta1, beta2", {}, 0.0, 0.999999, false, false, 2},
      {"optimizer.eps", T::Float, "1.0e-8", "AdamW epsilon", {}, 1e-30, 1.0},
      {"optimizer.momentum", T::Float, "0.9", "SGD momentum", {}, 0.0, 0.999999},
      {"optimizer.decay_norms_and_biases", T::Bool, "false", "Apply weight decay to norm weights and biases too"},

      {"scheduler.name", T::String, "cosine", "Learning-rate schedule after warmup", {"constant", "linear", "cosine"}},
      {"scheduler.warmup_steps", T::Int, "0", "Linear warmup from 0 over this many steps", {}, 0, 1e9},
      {"scheduler.min_lr_ratio", T::Float, "0.0", "linear/cosine: final lr as a share of the peak", {}, 0.0, 1.0},
  };
}

// The loop: batches, steps, evaluation, loss scaling, attention memory, experts' losses.
std::vector<KeySpec> training_keys() {
  using T = KeyType;
  return {
      planned({"training.batch_size", T::Int, "4", "Sequences per micro-batch (auto: the planner's, keeping training.global_batch_size)", {}, 1, 65536}),
      {"training.global_batch_size", T::Int, "null",
       "With training.batch_size: auto, the sequences per optimizer step over all ranks that the planner keeps "
       "(batch_size x grad_accum x ranks)", {}, 1, 1e9, true},
      {"training.grad_accum", T::Int, "1", "Micro-batches per optimizer step", {}, 1, 65536},
      may_change_on_resume({"training.max_steps", T::Int, "null", "Optimizer steps (or training.epochs)", {}, 1, 1e12, true}),
      may_change_on_resume({"training.epochs", T::Int, "null", "Passes over the training data (or training.max_steps)", {}, 1, 1e6, true}),
      {"training.clip_grad_norm", T::Float, "1.0", "Clip the global gradient norm (null: no clipping)", {}, 1e-9, 1e9, true},
      may_change_on_resume({"training.eval_every", T::Int, "0", "Evaluate every N steps (0: only at the end)", {}, 0, 1e12}),
      may_change_on_resume({"training.eval_batches", T::Int, "null", "Limit evaluation to N batches (null: whole split)", {}, 1, 1e12, true}),

      may_change_on_resume({"training.max_nonfinite_steps", T::Int, "10", "Abort after this many steps in a row with a non-finite loss (each is skipped)", {}, 1, 1e9}),

      planned({"precision", T::String, "fp32", "Matmul precision; bf16/fp16 keep fp32 master copies of trainable weights", {"fp32", "bf16", "fp16"}}),
      {"loss_scaling.init_scale", T::Float, "65536.0", "fp16: initial loss scale (GradScaler's init_scale)", {}, 1e-30, 1e30},
      {"loss_scaling.growth_factor", T::Float, "2.0", "fp16: scale multiplier after growth_interval clean steps", {}, 1.000001, 1e6},
      {"loss_scaling.backoff_factor", T::Float, "0.5", "fp16: scale multiplier after an inf/NaN gradient", {}, 1e-6, 0.999999},
      {"loss_scaling.growth_interval", T::Int, "2000", "fp16: clean steps before the scale grows", {}, 1, 1e12},
      {"memory.attention", T::String, "blocked",
       "Attention core: blocked (scores never held whole, masked blocks skipped, recomputed in backward) or "
       "materialized (the [B, heads, T, T] scores kept, or recomputed under activation_checkpointing: selective)",
       {"blocked", "materialized"}},
      planned({"memory.activation_checkpointing", T::String, "none", "Recompute activations in backward: none | full | selective | every_n:K",
       {}, {}, {}, false, false, 0, check_checkpointing}),
      {"moe.aux_loss_coef", T::Float, "null",
       "Weight of the routers' load-balancing loss on a model with experts (null: the config's router_aux_loss_coef; 0: off)",
       {}, 0.0, 1e6, true},
      {"moe.router_z_loss_coef", T::Float, "0.0",
       "Weight of the routers' z-loss (ST-MoE: mean squared logsumexp of the router logits) on a model with experts (0: off)",
       {}, 0.0, 1e6},
  };
}

// What a step minimises, and each objective's own keys (docs/objectives.md).
std::vector<KeySpec> objective_keys() {
  using T = KeyType;
  return {
      {"objective.name", T::String, "sft",
       "What training minimises: sft (next-token loss on the trained tokens), dpo, simpo or orpo (preference pairs, data.format: preference), "
       "kto (labelled completions, data.format: unpaired_preference), grpo or rloo (online RL from prompts, data.format: prompt, and reward.*), "
       "distill (on-policy distillation from objective.teacher, instruct or chat data)",
       {"sft", "dpo", "simpo", "orpo", "kto", "grpo", "rloo", "distill"}},
      owned_by({"dpo", "grpo"}, {"objective.loss_type", T::String, "null",
       "dpo: sigmoid (DPO; the default), ipo or hinge; grpo: how token losses are weighed and averaged, TRL's names: grpo (each completion's mean, "
       "then over completions), bnpo (the micro-batch's token mean), dr_grpo (over rows x max_new_tokens), dapo (over the step's completion tokens; "
       "the default) or cispo (clipped importance weights times the log-probability, over the step's tokens)",
       {"sigmoid", "ipo", "hinge", "grpo", "bnpo", "dr_grpo", "dapo", "cispo"}, {}, {}, true}),
      owned_by({"dpo", "simpo", "orpo", "kto", "grpo", "rloo", "distill"}, {"objective.beta", T::Float, "null",
       "dpo, kto: how strongly the policy is held to the reference; simpo: the reward scale; orpo: the odds-ratio term's weight lambda (default 0.1, as TRL's); "
       "grpo: the KL penalty's weight (default 0: no reference); rloo: the weight of each completion's KL taken from its reward (default 0.05); "
       "distill: the generalized JSD's interpolation in [0, 1], 0 forward KL, 1 reverse KL (default 0.5, as TRL's GKD)", {}, 0.0, 1e6, true}),
      owned_by({"dpo", "simpo"}, {"objective.label_smoothing", T::Float, "null",
       "dpo sigmoid, simpo: the share of pairs assumed mislabelled (conservative DPO; default 0)", {}, 0.0, 0.4999, true}),
      owned_by({"dpo", "kto"}, {"objective.precompute_reference", T::Bool, "null",
       "dpo, kto: compute the reference's log-probabilities once before training and keep them with the run (no reference forward, "
       "and under full fine-tuning no reference copy, while training; default false)", {}, {}, {}, true}),
      owned_by({"dpo", "kto"}, {"objective.reference_quantize", T::String, "null",
       "dpo, kto with full fine-tuning: the frozen reference copy's projections stored in int8 or nf4 (memory.int8_*/nf4_* settings; default none)",
       {kQuantNone, kQuantInt8, kQuantNf4}, {}, {}, true}),
      // kto (docs/objectives.md#kto); TRL's KTOConfig defaults.
      owned_by({"kto"}, {"objective.desirable_weight", T::Float, "null",
       "kto: the weight of a desirable completion's loss (default 1; raise it when desirable completions are fewer)", {}, 1e-6, 1e6, true}),
      owned_by({"kto"}, {"objective.undesirable_weight", T::Float, "null",
       "kto: the weight of an undesirable completion's loss (default 1)", {}, 1e-6, 1e6, true}),
      owned_by({"simpo"}, {"objective.gamma", T::Float, "null", "simpo: the target reward margin gamma (default 0.5, TRL's simpo_gamma)", {}, 0.0, 1e6, true}),
      // grpo (docs/objectives.md#grpo); TRL's GRPOConfig defaults.
      owned_by({"grpo", "rloo"}, {"objective.num_generations", T::Int, "null", "grpo, rloo: completions sampled per prompt, a group (default 8; rloo 2, as TRL's)", {}, 1, 1e6, true}),
      owned_by({"grpo", "rloo", "distill"}, {"objective.temperature", T::Float, "null", "grpo, rloo: sampling temperature, also the scale of the trained log-probabilities (default 1); distill: the samples' only (default 0.9)", {}, 1e-3, 100, true}),
      owned_by({"grpo", "rloo", "distill"}, {"objective.top_p", T::Float, "null", "grpo, rloo, distill: nucleus sampling's probability mass (default 1: off)", {}, 1e-6, 1.0, true}),
      owned_by({"grpo", "rloo", "distill"}, {"objective.top_k", T::Int, "null", "grpo, rloo, distill: sample among the k most likely tokens (default 0: off)", {}, 0, 1e9, true}),
      owned_by({"grpo", "rloo", "distill"}, {"objective.max_new_tokens", T::Int, "null", "grpo, rloo: the longest completion in tokens (default 256; TRL's max_completion_length); distill: a sampled completion's (default 128)", {}, 1, 1e6, true}),
      owned_by({"grpo", "rloo", "distill"}, {"objective.stop", T::StringList, "null", "grpo, rloo, distill: text stop strings that end a completion (besides eos and the chat format's end of turn)", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"objective.epsilon", T::Float, "null", "grpo, rloo: the probability ratio's clip range below 1, and above unless epsilon_high (default 0.2)", {}, 0.0, 1.0, true}),
      owned_by({"grpo", "rloo"}, {"objective.epsilon_high", T::Float, "null",
       "grpo, rloo: the ratio's clip range above 1 (DAPO's clip-higher; default: epsilon); loss_type cispo: the importance weight's cap (ScaleRL's epsilon_max, e.g. 5)",
       {}, 0.0, 100, true}),
      owned_by({"grpo"}, {"objective.importance_sampling_level", T::String, "null",
       "grpo: the importance weight per token (the default) or per completion, exp of its tokens' mean log-ratio (sequence: GSPO)", {"token", "sequence"}, {}, {}, true}),
      owned_by({"grpo"}, {"objective.delta", T::Float, "null",
       "grpo: two-sided clipping, the unclipped importance weight capped at delta (INTELLECT-2; > 1 + epsilon_high; default: off)", {}, 1.0, 1e6, true}),
      owned_by({"grpo"}, {"objective.top_entropy_quantile", T::Float, "null",
       "grpo: train only the completion tokens whose entropy is in this top fraction of the micro-batch's (default 1: every token)", {}, 1e-6, 1.0, true}),
      owned_by({"grpo"}, {"objective.entropy_coef", T::Float, "null",
       "grpo: the entropy bonus, minus this times the mean entropy of the trained completion tokens (TRL's entropy_coef; default 0: off)", {}, -10.0, 10.0, true}),
      owned_by({"rloo"}, {"objective.normalize_advantages", T::Bool, "null",
       "rloo: the leave-one-out advantages standardised over the whole batch (mean, std + 1e-4; default false, as TRL's)", {}, {}, {}, true}),
      owned_by({"grpo"}, {"objective.multi_objective_aggregation", T::String, "null",
       "grpo with several rewards: sum_then_normalize (weighted sum, then the advantages; the default) or normalize_then_sum (each reward normalised "
       "in its group, the weighted sum normalised over the batch; scale_rewards does not apply)", {"sum_then_normalize", "normalize_then_sum"}, {}, {}, true}),
      owned_by({"grpo"}, {"objective.scale_rewards", T::String, "null", "grpo: advantages divided by the rewards' std within each group, over the batch, or not (default group)",
       {"group", "batch", "none"}, {}, {}, true}),
      owned_by({"grpo"}, {"objective.aggregation", T::String, "null",
       "grpo: objective.loss_type's former name, read as it: sequence = grpo, token = dapo, fixed = dr_grpo", {"sequence", "token", "fixed"}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"objective.num_iterations", T::Int, "null", "grpo, rloo: optimisation steps per generation batch, the sampling policy's log-probabilities kept (default 1)", {}, 1, 1e4, true}),
      owned_by({"grpo", "rloo"}, {"objective.mask_truncated_completions", T::Bool, "null", "grpo, rloo: completions cut by max_new_tokens train nothing (default false)", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"objective.mask_truncated", T::Bool, "null", "grpo, rloo: objective.mask_truncated_completions' former name, read as it", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"objective.share_prompt", T::String, "null",
       "grpo, rloo: train a group's completions in one row after one copy of their prompt (the same loss, the prompt's work done once): "
       "auto (when that costs less, the default), always or never", {"auto", "always", "never"}, {}, {}, true}),
      // distill (docs/objectives.md#distillation); TRL's GKDConfig defaults.
      owned_by({"distill"}, {"objective.teacher.path", T::String, "null",
       "distill: the teacher, a model directory (config.json, safetensors, tokenizer) with the run's tokenizer and vocabulary", {}, {}, {}, true}),
      owned_by({"distill"}, {"objective.teacher.dtype", T::String, "null", "distill: the teacher's storage dtype (default model.dtype)",
       {"fp32", "bf16", "fp16"}, {}, {}, true}),
      owned_by({"distill"}, {"objective.teacher.quantize", T::String, "null",
       "distill: the teacher's projections stored in int8 or nf4 (memory.int8_*/nf4_* settings; default none)", {kQuantNone, kQuantInt8, kQuantNf4}, {}, {}, true}),
      owned_by({"distill"}, {"objective.lmbda", T::Float, "null",
       "distill: the fraction of micro-batches whose completions the student samples itself (on-policy); the rest are the data's (default 0.5, TRL's)", {}, 0.0, 1.0, true}),
      owned_by({"distill"}, {"objective.seq_kd", T::Bool, "null",
       "distill: the micro-batches that are not on-policy take the teacher's sampled completions instead of the data's (sequence-level KD; default false)", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"reward.exact", T::Map, "null", "grpo, rloo: 1 when the completion (trimmed) equals the record's `field`; {field, weight}", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"reward.contains", T::Map, "null", "grpo, rloo: 1 when the completion contains the record's `field`; {field, weight}", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"reward.regex", T::Map, "null", "grpo, rloo: 1 when the record's `field`, a regular expression, matches in the completion; {field, weight}", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"reward.numeric", T::Map, "null", "grpo, rloo: 1 when the completion's last number is within `tolerance` of the record's `field`; {field, tolerance, weight}", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"reward.format", T::Map, "null", "grpo, rloo: 1 when the completion matches `pattern` (a regular expression) whole; {pattern, weight}", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"reward.command", T::StringList, "null",
       "grpo, rloo: an external reward program [program, args...]: one JSON line per completion on its stdin, one number per line back", {}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"reward.command_weight", T::Float, "null", "grpo, rloo: reward.command's weight (default 1)", {}, -1e6, 1e6, true}),
      owned_by({"grpo", "rloo"}, {"reward.timeout_s", T::Float, "null", "grpo, rloo: reward.command's longest wait for one answer, in seconds (default 10)", {}, 1e-3, 1e6, true}),
      owned_by({"grpo", "rloo"}, {"reward.on_error", T::String, "null",
       "grpo, rloo: a reward.command that crashes, hangs or prints no number: fail (end the step, the default) or zero (score 0, count it, restart it)",
       {"fail", "zero"}, {}, {}, true}),
      owned_by({"grpo", "rloo"}, {"reward.length", T::Map, "null", "grpo, rloo: DAPO's overlong penalty, 0 to -1 over the `cache` tokens before `max_tokens`; {max_tokens, cache, weight}", {}, {}, {}, true}),
  };
}

// Memory, checkpoints, distribution and logging.
std::vector<KeySpec> runtime_keys() {
  using T = KeyType;
  return {
      may_change_on_resume({"logging.samples_every_n_steps", T::Int, "0", "grpo: write a few prompts with their completions and rewards to samples.jsonl every N steps (0: never)", {}, 0, 1e12}),
      planned({"memory.chunked_loss", T::Bool, "true", "Project to the vocabulary a chunk of positions at a time (no full logits)"}),
      planned({"memory.quantize_base", T::String, kQuantNone, "Frozen base weights in int8 or nf4 (LoRA only)", {kQuantNone, kQuantInt8, kQuantNf4}}),
      {"memory.allocator", T::String, "fast",
       "fast: tensors reuse the memory earlier steps freed (no mapping per tensor; resident memory stays at its peak); exact: freed memory goes back at once (slower steps)",
       {"fast", "exact"}},
      may_change_on_resume({"memory.limit", T::String, "null",
       "The most this run may hold where the model lives (8GB, 500MB; on the CPU its resident memory): past it the step ends with one "
       "line naming the phase, the ledger's prediction and a plan that fits (null: no limit)", {}, {}, {}, true}),
      {"memory.int8_threshold", T::Float, std::to_string(kInt8ThresholdDefault), "int8_gemm kernel: activation outlier threshold of LLM.int8 (0: no outlier decomposition)", {}, 0, 1e9},
      {"memory.int8_kernel", T::String, kInt8KernelDequantize, "int8: dequantize to the compute dtype then matmul, or oneDNN's int8 GEMM (slower on the measured CPU)",
       {kInt8KernelDequantize, kInt8KernelGemm}},
      {"memory.nf4_blocksize", T::Int, std::to_string(kNf4BlocksizeDefault), "nf4: weights per absmax block (64, 128, ... 4096)", {}, 64, 4096},
      {"memory.nf4_double_quant", T::Bool, kNf4DoubleQuantDefault ? "true" : "false", "nf4: quantise the block absmax values too (QLoRA's double quantisation)"},

      may_change_on_resume({"checkpoint.every_n_steps", T::Int, "0", "Write a checkpoint every N steps (0: only at the end)", {}, 0, 1e12}),
      may_change_on_resume({"checkpoint.keep_last", T::Int, "3", "Checkpoints kept", {}, 1, 1e6}),
      may_change_on_resume({"checkpoint.shard_size", T::String, "5GB", "Largest safetensors shard of a full-model checkpoint (5GB, 500MB, 2GiB)"}),
      may_change_on_resume({"checkpoint.layout", T::String, "auto",
       "whole: rank 0 writes the model/adapter and optimizer state whole; sharded: each rank writes its part (ctune consolidate makes it whole); auto: sharded when the optimizer state is",
       {"auto", "whole", "sharded"}}),

      planned(may_change_on_resume({"distributed.strategy", T::String, "no_shard", "Sharding of parameters, gradients, optimizer state",
       {"no_shard", "shard_grad_op", "full_shard", "hybrid_shard"}})),
      planned(may_change_on_resume({"distributed.cpu_offload", T::Bool, "false", "full_shard/hybrid_shard: parameter shards, their gradients and optimizer state in host memory"})),
      may_change_on_resume({"distributed.prefetch", T::Bool, "false", "full_shard/hybrid_shard: gather the next block while this one computes (two blocks whole at once)"}),
      may_change_on_resume({"distributed.backend", T::String, "auto", "Collectives between ranks: gloo (CPU), nccl (CUDA); auto picks by device",
       {"auto", "gloo", "nccl"}}),
      may_change_on_resume({"distributed.timeout_s", T::Int, "120", "A rank that dies or stops answering fails the run within this many seconds",
       {}, 1, 86400}),

      may_change_on_resume({"logging.every_n_steps", T::Int, "1", "Log a progress line every N steps", {}, 1, 1e12}),
      may_change_on_resume({"logging.tensorboard", T::Bool, "true", "Also write the metrics as TensorBoard event files in output_dir/tb"}),
      may_change_on_resume({"logging.profile", T::Bool, "false",
       "Time each step by category (metrics.jsonl profile_ms, a table in the log, steps 2-3 as a Chrome trace in output_dir/profile.trace.json)"}),
  };
}

// Every recipe key, in the order the docs list them.
std::vector<KeySpec> build_schema() {
  std::vector<KeySpec> s;
  for (const auto part : {run_and_data_keys, method_keys, training_keys, objective_keys, runtime_keys}) {
    auto keys = part();
    s.insert(s.end(), std::make_move_iterator(keys.begin()), std::make_move_iterator(keys.end()));
  }
  return s;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string leaf(const std::string& key) {
  auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string number_text(double v) {
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

}  // namespace

const std::vector<KeySpec>& recipe_schema() {
  static const std::vector<KeySpec> schema = build_schema();
  return schema;
}

const KeySpec* find_key_spec(const std::string& key) {
  for (const auto& spec : recipe_schema())
    if (spec.key == key) return &spec;
  return nullptr;
}

std::string suggest_key(const std::string& unknown) {
  // Names users bring from Hugging Face Trainer, PEFT and torchtune configs.
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"learning_rate", "lr"}, {"lr_scheduler", "name"}, {"warmup", "warmup_steps"},
      {"num_warmup_steps", "warmup_steps"}, {"num_epochs", "epochs"}, {"num_train_epochs", "epochs"},
      {"gradient_accumulation_steps", "grad_accum"}, {"lora_alpha", "alpha"}, {"lora_dropout", "dropout"},
      {"r", "rank"}, {"lora_rank", "rank"}, {"max_length", "max_seq_len"}, {"seq_len", "max_seq_len"},
      {"micro_batch_size", "batch_size"}, {"per_device_train_batch_size", "batch_size"},
      {"max_grad_norm", "clip_grad_norm"}, {"eval_steps", "eval_every"}, {"save_steps", "every_n_steps"},
      {"save_total_limit", "keep_last"}, {"use_rslora", "rslora"}, {"lora_target_modules", "target_modules"},
      {"torch_dtype", "dtype"}, {"mixed_precision", "precision"}, {"gradient_checkpointing", "activation_checkpointing"}};
  const auto dot = unknown.rfind('.');
  const std::string section = dot == std::string::npos ? "" : unknown.substr(0, dot);
  std::string want = leaf(unknown);
  for (const auto& [from, to] : aliases)
    if (want == from) want = to;

  // 1. The same (or aliased) leaf: in the same section first ("training.lr" -> "optimizer.lr").
  std::string same_leaf;
  for (const auto& spec : recipe_schema()) {
    if (leaf(spec.key) != want) continue;
    const auto d = spec.key.rfind('.');
    if (same_leaf.empty() || (d != std::string::npos && spec.key.substr(0, d) == section)) same_leaf = spec.key;
  }
  if (!same_leaf.empty() && same_leaf != unknown) return same_leaf;

  // 2. A typo: smallest edit distance, leaves within the same section weighed first.
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const auto& spec : recipe_schema()) {
    const auto d = spec.key.rfind('.');
    const bool same_section = d != std::string::npos && spec.key.substr(0, d) == section;
    std::size_t dist = same_section ? edit_distance(want, leaf(spec.key)) : edit_distance(unknown, spec.key) + 1;
    if (dist < best_distance) {
      best_distance = dist;
      best = spec.key;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, want.size() / 3);
  return best_distance <= limit ? best : std::string();
}

std::string describe_expected(const KeySpec& spec) {
  std::string range;
  if (spec.min && spec.max) {
    range = " in [" + number_text(*spec.min) + ", " + number_text(*spec.max) + "]";
  } else if (spec.min) {
    range = " >= " + number_text(*spec.min);
  }
  auto one_of = [&] {
    std::string s;
    for (std::size_t i = 0; i < spec.allowed.size(); ++i) s += (i ? ", " : "") + spec.allowed[i];
    return s;
  };
  std::string text;
  switch (spec.type) {
    case KeyType::Int: text = "an integer" + range; break;
    case KeyType::Float: text = "a number" + range; break;
    case KeyType::Bool: text = "true or false"; break;
    case KeyType::Path: text = "a path"; break;
    case KeyType::Map: text = "a mapping of names to strings, numbers or booleans"; break;
    case KeyType::StringList: text = spec.allowed.empty() ? "a list of strings" : "a list of (" + one_of() + ")"; break;
    case KeyType::FloatList:
      text = (spec.length ? "a list of " + std::to_string(spec.length) + " numbers" : std::string("a list of numbers")) + range;
      break;
    case KeyType::String: text = spec.allowed.empty() ? "a string" : "one of " + one_of(); break;
  }
  if (spec.planned) text += ", or auto (the planner's choice: ctune plan)";
  return spec.nullable ? text + " or null" : text;
}

}  // namespace ctune
