#include "train/objective/logps.h"

#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include <optional>

#include "ops/profile_regions.h"
#include "train/step/chunked_loss.h"

namespace ctune::train {

at::Tensor policy_hidden(model::CausalLM& lm, const TensorBatch& b) {
  // A model with experts balances its routers over the positions the objective scores (the
  // reference's forward, without gradients, records nothing the policy's would not replace).
  return lm->hidden(forward_inputs(lm, b));  // [B, T, H]
}

TokenLogps token_logps(model::CausalLM& lm, const at::Tensor& hidden, const at::Tensor& labels, double temperature, bool entropy,
                       const at::Tensor& sequences) {
  RECORD_USER_SCOPE(ops::region::kLoss);
  const auto B = hidden.size(0), T = hidden.size(1), H = hidden.size(2);
  const auto acc = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TokenLogps out;
  const auto empty = [&] {
    out.token = (hidden.sum() * 0.0).to(acc).expand({0});  // keeps the graph connected when nothing is a target
    out.row = at::zeros({0}, labels.options().dtype(at::kLong));
    if (entropy) out.entropy = at::zeros({0}, hidden.options().dtype(acc));
    return out;
  };
  if (T < 2) return empty();
  auto h = hidden.narrow(1, 0, T - 1).reshape({B * (T - 1), H});
  auto targets = labels.narrow(1, 1, T - 1).reshape({B * (T - 1)});
  auto keep = (targets != data::kIgnoreIndex).nonzero().squeeze(1);
  if (keep.numel() == 0) return empty();
  h = h.index_select(0, keep);
  targets = targets.index_select(0, keep);
  out.row = sequences.defined() ? sequences.narrow(1, 1, T - 1).reshape({B * (T - 1)}).index_select(0, keep)
                                : at::div(keep, T - 1, "floor");
  // A head whose adapter is off (the reference under LoRA) is plain too: the reference's
  // log-probabilities are then the base model's, bit for bit.
  const double cap = lm->config().arch.final_softcap;
  const bool plain_head =
      !lm->lm_head || ((!lm->lm_head->adapter || model::AdaptersOff::active()) && !lm->lm_head->bias.defined());
  if (plain_head && (temperature == 1.0 || cap == 0)) {
    // A chunk of positions projected at a time, as the token loss does (chunked_loss.h); a
    // temperature without a soft-cap scales the hidden states (the head is linear).
    const auto& weight = lm->lm_head ? lm->lm_head->weight : lm->model->embed_tokens->weight;
    // The entropy, a reported figure, comes from the same sweep of each chunk's logits.
    const auto scaled = temperature == 1.0 ? h : h / temperature;
    at::Tensor ent;
    out.token = chunked_token_logps(scaled, weight, targets, 0, lm->compute_dtype(), cap, entropy ? &ent : nullptr).to(acc);
    if (entropy) out.entropy = ent.to(acc);
  } else {
    out.token = at::log_softmax(lm->head(h).to(acc) / temperature, -1).gather(1, targets.unsqueeze(1)).squeeze(1);
  }
  if (entropy && !out.entropy.defined()) {
    // A head with an adapter or a bias: projected again without gradients, a chunk of rows at a time.
    at::NoGradGuard no_grad;
    const auto n = h.size(0);
    const auto chunk = default_chunk_rows(lm->config().vocab_size, 4);
    std::vector<at::Tensor> parts;
    for (std::int64_t i = 0; i < n; i += chunk) {
      const auto logp = at::log_softmax(lm->head(h.narrow(0, i, std::min(chunk, n - i)).detach()).to(acc) / temperature, -1);
      parts.push_back(-(logp.exp() * logp).sum(-1));
    }
    out.entropy = at::cat(parts);
  }
  return out;
}

const at::Tensor* plain_head_weight(model::CausalLM& lm) {
  if (!lm->lm_head) return &lm->model->embed_tokens->weight;
  return !lm->lm_head->adapter && !lm->lm_head->bias.defined() ? &lm->lm_head->weight : nullptr;
}

at::Tensor target_hidden(const at::Tensor& hidden, const at::Tensor& labels) {
  const auto B = hidden.size(0), T = hidden.size(1), H = hidden.size(2);
  if (T < 2) return hidden.new_zeros({0, H});
  const auto keep = (labels.narrow(1, 1, T - 1).reshape({B * (T - 1)}) != data::kIgnoreIndex).nonzero().squeeze(1);
  return hidden.narrow(1, 0, T - 1).reshape({B * (T - 1), H}).index_select(0, keep);
}

at::Tensor weighted_entropy_sum(model::CausalLM& lm, const at::Tensor& h, const at::Tensor& weights, double temperature) {
  RECORD_USER_SCOPE(ops::region::kLoss);
  const auto acc = h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  if (h.size(0) == 0) return (h.sum() * 0.0).to(acc);
  if (const at::Tensor* weight = plain_head_weight(lm)) {
    return chunked_entropy_sum(h, *weight, weights, temperature, 0, lm->compute_dtype(), lm->config().arch.final_softcap).to(acc);
  }
  const auto n = h.size(0), chunk = default_chunk_rows(lm->config().vocab_size, 12);
  at::Tensor total;
  for (std::int64_t i = 0; i < n; i += chunk) {
    const auto rows = std::min(chunk, n - i);
    const auto logp = at::log_softmax(lm->head(h.narrow(0, i, rows)).to(acc) / temperature, -1);
    const auto part = (-(logp.exp() * logp).sum(-1) * weights.narrow(0, i, rows).to(acc)).sum();
    total = total.defined() ? total + part : part;
  }
  return total;
}

SequenceLogps row_logps(model::CausalLM& lm, const at::Tensor& hidden, const at::Tensor& labels) {
  const auto B = hidden.size(0);
  const auto acc = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  SequenceLogps out;
  out.sum = hidden.sum() * 0.0;  // keeps the graph connected when nothing is a target
  out.sum = out.sum.to(acc).expand({B}).clone();
  out.count = at::zeros({B}, hidden.options().dtype(acc));
  const TokenLogps t = token_logps(lm, hidden, labels);
  if (t.token.numel() == 0) return out;
  out.sum = out.sum.index_add(0, t.row, t.token);
  out.count = out.count.index_add(0, t.row, at::ones_like(t.token).detach());
  return out;
}

SequenceLogps sequence_logps(model::CausalLM& lm, const TensorBatch& b) { return row_logps(lm, policy_hidden(lm, b), b.labels); }

SequenceLogps reference_logps(model::CausalLM& policy, model::CausalLM& reference, const TensorBatch& batch) {
  at::NoGradGuard no_grad;
  std::optional<model::AdaptersOff> off;
  if (!reference) off.emplace();
  model::CausalLM& lm = reference ? reference : policy;
  auto out = sequence_logps(lm, batch);
  lm->model->scopes->release_all();
  return out;
}

at::Tensor reference_token_logps(model::CausalLM& policy, model::CausalLM& reference, const TensorBatch& batch, double temperature) {
  at::NoGradGuard no_grad;
  std::optional<model::AdaptersOff> off;
  if (!reference) off.emplace();
  model::CausalLM& lm = reference ? reference : policy;
  auto out = token_logps(lm, policy_hidden(lm, batch), batch.labels, temperature).token;
  lm->model->scopes->release_all();
  return out;
}

double pairs_in(const TensorBatch& batch) {
  return batch.rows_per_group == 2 ? static_cast<double>(batch.input_ids.size(0) / 2) : 0.0;
}

PairLogps split_pairs(const SequenceLogps& rows) {
  const auto even = at::arange(0, rows.sum.size(0), 2, at::TensorOptions().dtype(at::kLong).device(rows.sum.device()));
  const auto odd = even + 1;
  return {rows.sum.index_select(0, even), rows.sum.index_select(0, odd), rows.count.index_select(0, even),
          rows.count.index_select(0, odd)};
}

std::vector<std::string> reward_metric_names() {
  return {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen", "logps/rejected"};
}

std::vector<double> reward_metric_sums(const at::Tensor& reward_c, const at::Tensor& reward_r, const at::Tensor& logps_c,
                                       const at::Tensor& logps_r) {
  at::NoGradGuard no_grad;
  auto total = [](const at::Tensor& t) { return t.detach().sum().item<double>(); };
  return {total(reward_c), total(reward_r), total(reward_c - reward_r), total((reward_c > reward_r).to(at::kDouble)), total(logps_c),
          total(logps_r)};
}

}  // namespace ctune::train
