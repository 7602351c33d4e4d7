// The sparse mixture-of-experts MLP (Mixtral's block_sparse_moe, Qwen3-MoE's sparse mlp): a
// router picks k of E SwiGLU experts per token; each expert multiplies only the tokens routed to
// it (grouped by one sort, no capacity, nothing dropped), and their outputs come back weighted
// by the router's probabilities. The router's auxiliary load-balancing loss is recorded per
// forward in a RouterRecord the model shares with its sparse layers. docs/families.md#mixture-of-experts.
#pragma once

#include <memory>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "model/activation_cost.h"
#include "model/config.h"
#include "model/layers.h"
#include "model/mlp.h"
#include "model/stacked_experts.h"

namespace ctune::model {

// What a training forward's sparse layers report for the auxiliary loss (Switch Transformer's,
// with transformers' load_balancing_loss_func semantics over all sparse layers at once):
//   aux = E · Σ_e (C_e / (L N)) · (S_e / (L N)),
// C_e: tokens routed to expert e summed over the L sparse layers (each token counts once per
// chosen expert), S_e: the router probability of e summed likewise, N: the tokens counted (the
// main loss's mask). Only S carries a gradient: each layer's share, E C_e / (L N)^2 times the
// weight the caller gives the aux loss, is passed to that layer's router in the layer's own
// backward (so activation checkpointing and sharded blocks need nothing more).
//
// And the router z-loss (ST-MoE's; transformers' router_z_loss_func over all sparse layers at
// once), which keeps the routers' logits small:
//   z = (1 / (L N)) Σ_l Σ_t lse(logits_t^l)²,
// whose gradient 2 lse_t softmax(logits_t) / (L N) needs nothing beyond the layer: a layer adds
// it to its router logits in its own backward, scaled by the weight the caller arms.
struct RouterRecord {
  // Set by the caller for a training forward: [tokens] (the forward's flattened rows), 1 where a
  // token counts. Undefined: nothing is recorded (evaluation, generation).
  at::Tensor token_mask;
  std::int64_t experts = 0;
  // Per sparse layer (indexed by layer; undefined for dense ones): [E] fp32, detached.
  std::vector<at::Tensor> counts, prob_sums;
  // Per sparse layer: Σ over the counted tokens of lse(logits)², fp32 scalar, detached.
  std::vector<at::Tensor> z_sums;
  // Set once by the run when the z-loss trains (moe.router_z_loss_coef > 0): training forwards
  // then keep the router logits for its gradient. Its value is recorded either way.
  bool z_loss_trains = false;

  // Starts a forward over `mask` ([tokens], any dtype), clearing the previous one's figures.
  void begin(const at::Tensor& mask, std::int64_t layers);
  void clear();
  bool recording() const { return token_mask.defined(); }
  // After the forward: the aux loss's value (0 when nothing was recorded).
  double aux_loss() const;
  // After the forward: per sparse layer, the share of routed tokens each expert got [E].
  std::vector<std::pair<std::int64_t, std::vector<double>>> expert_load() const;
  // After the forward: the z-loss's value (0 when nothing was recorded).
  double z_loss() const;
  // After the forward and before its backward: the coming backward adds `aux_weight` times the
  // aux loss's gradient and `z_weight` times the z-loss's (weight = d(the loss backward runs on)
  // / d(that loss)). Computes, once, d(loss)/d(S^l) = aux_weight · E · C / (L N)^2, the same for
  // every layer, and the z-gradient's factor z_weight · 2 / (L N).
  void arm(double aux_weight, double z_weight);
  // What arm() computed; undefined (0) when unarmed or nothing was routed.
  const at::Tensor& prob_sum_grad() const { return prob_sum_grad_; }
  double z_grad_scale() const { return z_grad_scale_; }

 private:
  at::Tensor prob_sum_grad_;
  double z_grad_scale_ = 0;
};

// The router: logits = x Wᵀ (+ b), W [experts, hidden] (`gate.weight`; gpt-oss's `router.weight`
// and `router.bias`). Not a Linear: never a LoRA target and never quantised.
class RouterImpl : public torch::nn::Module {
 public:
  RouterImpl(std::int64_t hidden, std::int64_t experts, at::ScalarType dtype, bool bias = false);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight, bias;
  at::ScalarType compute_dtype = at::ScalarType::Undefined;  // as LinearImpl's
  // Under LoRA, the router trains (in fp32) and is saved with the adapter: PEFT's
  // modules_to_save ["gate"] (peft.train_router; peft/lora.h).
  bool saved_with_adapter = false;
};
TORCH_MODULE(Router);

// The experts are MLPs (model/mlp.h) of the expert intermediate size, under their family's
// names (ModuleNames::expert_gate, expert_up, expert_down). With a shared expert
// (MoeArchitecture::shared_intermediate) every token also runs it, scaled by
// sigmoid(shared_expert_gate x), a [1, H] projection (Qwen3.5-MoE). gpt-oss's experts are one
// StackedExperts module instead (MoeArchitecture::clamped_stacked_experts, model/stacked_experts.h).
// The router, registered under ModuleNames::router, softmaxes all E logits and renormalises the
// top k: for gpt-oss, whose router softmaxes the k largest logits, that is the same weights.
class SparseMoeImpl : public torch::nn::Module {
 public:
  SparseMoeImpl(const ModelConfig& config, at::ScalarType dtype, std::int64_t layer, std::shared_ptr<RouterRecord> record);
  at::Tensor forward(const at::Tensor& x);  // [.., H] -> [.., H]
  // What forward keeps for backward: the router's input and probabilities, the routed rows'
  // gather, each routed row's expert activations, the combine's inputs.
  static ActivationCost saved_activations(const ModelConfig& config, const ActivationShape& shape);

  Router gate{nullptr};
  torch::nn::ModuleList experts{nullptr};
  StackedExperts stacked_experts{nullptr};  // instead of `experts` (gpt-oss)
  MLP shared_expert{nullptr};         // with a shared expert
  Linear shared_expert_gate{nullptr};
  std::int64_t top_k = 0;
  bool normalize = true;
  std::int64_t layer = 0;
  std::shared_ptr<RouterRecord> record;
  // Whether each expert's rows are padded so GEMM shapes repeat (padded_expert_rows): by the
  // activations' dtype and device, or forced (a test compares both paths).
  enum class RowPadding { kAuto, kAlways, kNever };
  RowPadding row_padding = RowPadding::kAuto;

 private:
  // The routed experts' weighted sum (what forward adds the shared expert to).
  at::Tensor forward_routed(const at::Tensor& x);
  // Each expert's MLP over its slice of `rows` (sizes[e] rows; empty experts skipped), stacked.
  at::Tensor run_experts(const std::vector<at::Tensor>& rows, const std::vector<std::int64_t>& sizes);
};
TORCH_MODULE(SparseMoe);

// Whether routed row counts are padded for activations like `x`: reduced precision on CPU.
bool pads_expert_rows(const at::Tensor& x);
bool pads_expert_rows(at::Device device, at::ScalarType compute);
// Each count of `sizes` rounded up to a multiple of 2^(⌊log2 M⌋ - 4) (counts under 32 kept):
// at most 16 distinct counts per octave, under 1/16 more rows.
std::vector<std::int64_t> padded_expert_rows(const std::vector<std::int64_t>& sizes);
// The rows padding adds to a layer's `routed` rows over `experts`, expected when every expert
// gets the mean load: half a quantum less one each (the ledger's estimate; the real count
// depends on the routing).
std::int64_t expected_padding_rows(std::int64_t routed, std::int64_t experts);

}  // namespace ctune::model
