// Per-sequence log-probabilities: what preference objectives compare. Row r of a batch scores
// sum over its targets t of log p(labels[t + 1] | ..t), the same pairs the token loss counts
// (train/step/loss.h): prompt and padding positions are not targets, so each row's sum is the
// response's log-probability given its prompt (TRL's `logps`).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "model/decoder.h"
#include "train/step/loss.h"

namespace ctune::train {

struct SequenceLogps {
  at::Tensor sum;    // [rows] fp32 (float64 for a float64 model), differentiable in grad mode
  at::Tensor count;  // [rows] the targets of each row, same dtype
};

// The preference pairs of `batch`: its rows / 2, or 0 when its rows are not pairs (a rank's idle
// batch). The unit every pair objective normalises by.
double pairs_in(const TensorBatch& batch);

// A batch of preference pairs, rows 2i (chosen) and 2i + 1 (rejected), split by response.
struct PairLogps {
  at::Tensor chosen, rejected;              // [pairs] summed log-probabilities
  at::Tensor chosen_count, rejected_count;  // [pairs] their responses' tokens
};
PairLogps split_pairs(const SequenceLogps& rows);

// TRL's reward metrics of a batch of pairs, as sums over the pairs (the trainer divides by the
// pairs): rewards/chosen, rewards/rejected, rewards/margins, rewards/accuracies (chosen reward
// strictly greater), logps/chosen, logps/rejected. The objective says what a reward and a logp
// are (DPO: beta times the log-ratio to the reference, and summed log-probabilities).
std::vector<std::string> reward_metric_names();
std::vector<double> reward_metric_sums(const at::Tensor& reward_chosen, const at::Tensor& reward_rejected, const at::Tensor& logps_chosen,
                                       const at::Tensor& logps_rejected);

// The model's final hidden states over `batch` ([B, T, H]), its routers' mask included.
at::Tensor policy_hidden(model::CausalLM& model, const TensorBatch& batch);
// Per target of `labels` ([B, T], kIgnoreIndex elsewhere), in row-major order: log p(labels[t + 1]
// | ..t) with the logits divided by `temperature` (online RL scores its samples at the temperature
// they were drawn with, as TRL does), its row, and when asked its distribution's entropy
// (without gradients). fp32 (float64 for a float64 model), differentiable in grad mode. With
// `sequences` ([B, T], TensorBatch::sequence_ids) a target's row is its sequence there.
struct TokenLogps {
  at::Tensor token;    // [N]
  at::Tensor row;      // [N] int64
  at::Tensor entropy;  // [N], or undefined
};
TokenLogps token_logps(model::CausalLM& model, const at::Tensor& hidden, const at::Tensor& labels, double temperature = 1.0,
                       bool entropy = false, const at::Tensor& sequences = {});

// The output head as one matrix ([V, H]: lm_head's weight, or the tied embeddings) when it is
// plain (no adapter, no bias), for the chunked losses of train/step/chunked_loss.h; null else.
const at::Tensor* plain_head_weight(model::CausalLM& model);

// The rows of `hidden` ([B, T, H]) at the positions that predict a target of `labels` ([B, T]),
// [N, H], in token_logps' order.
at::Tensor target_hidden(const at::Tensor& hidden, const at::Tensor& labels);

// Sum over target rows `h` ([N, H], target_hidden's) of `weights[r]` times the entropy of the
// model's next-token distribution at `temperature`, differentiable (GRPO's entropy bonus): the
// chunked head where it is plain (chunked_loss.h chunked_entropy_sum), else autograd a chunk of
// rows at a time.
at::Tensor weighted_entropy_sum(model::CausalLM& model, const at::Tensor& h, const at::Tensor& weights, double temperature);

// Per row of `hidden`, the sum of log p(labels[t + 1] | ..t) over the targets of `labels`
// ([B, T], kIgnoreIndex elsewhere) and their count.
SequenceLogps row_logps(model::CausalLM& model, const at::Tensor& hidden, const at::Tensor& labels);

// The model's forward over `batch` and the per-row sums of its labels' targets. The vocabulary projection runs on the
// targeted positions only, in fp32 softmax (the logits in the model's compute dtype).
SequenceLogps sequence_logps(model::CausalLM& model, const TensorBatch& batch);

// The reference's log-probabilities, without gradients: `reference`'s (a frozen copy), or, when
// it is null, the policy's with its adapters off (LoRA). Under full_shard the model that ran is
// sharded; what its forward left whole for a backward that will not come (the head) is freed.
SequenceLogps reference_logps(model::CausalLM& policy, model::CausalLM& reference, const TensorBatch& batch);
// The same per target (token_logps' order), at `temperature`: what online RL's KL penalty compares with.
at::Tensor reference_token_logps(model::CausalLM& policy, model::CausalLM& reference, const TensorBatch& batch, double temperature);

}  // namespace ctune::train
