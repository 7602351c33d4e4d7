#include "model/moe.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <numeric>

#include "model/mlp.h"
#include "ops/compute.h"

namespace ctune::model {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void RouterRecord::begin(const at::Tensor& mask, std::int64_t layers) {
  token_mask = mask.reshape({-1}).to(at::kFloat);
  prob_sum_grad_ = at::Tensor();
  z_grad_scale_ = 0;
  counts.assign(static_cast<std::size_t>(layers), at::Tensor());
  prob_sums.assign(static_cast<std::size_t>(layers), at::Tensor());
  z_sums.assign(static_cast<std::size_t>(layers), at::Tensor());
}

void RouterRecord::clear() {
  token_mask = at::Tensor();
  prob_sum_grad_ = at::Tensor();
  z_grad_scale_ = 0;
  counts.clear();
  prob_sums.clear();
  z_sums.clear();
}

namespace {
// Σ over the recorded layers of `per_layer`, and how many there were.
std::pair<at::Tensor, std::int64_t> layer_sum(const std::vector<at::Tensor>& per_layer) {
  at::Tensor sum;
  std::int64_t n = 0;
  for (const auto& t : per_layer) {
    if (!t.defined()) continue;
    sum = sum.defined() ? sum + t : t.clone();
    ++n;
  }
  return {sum, n};
}
}  // namespace

double RouterRecord::aux_loss() const {
  if (!recording()) return 0;
  const auto [C, L] = layer_sum(counts);
  const auto [S, L2] = layer_sum(prob_sums);
  const double tokens = token_mask.sum().item<double>();
  if (L == 0 || tokens == 0) return 0;
  const double LN = static_cast<double>(L) * tokens;
  return static_cast<double>(experts) * (C.to(at::kDouble) * S.to(at::kDouble)).sum().item<double>() / (LN * LN);
}

double RouterRecord::z_loss() const {
  if (!recording()) return 0;
  const auto [Z, L] = layer_sum(z_sums);
  const double tokens = token_mask.sum().item<double>();
  if (L == 0 || tokens == 0) return 0;
  return Z.item<double>() / (static_cast<double>(L) * tokens);
}

void RouterRecord::arm(double aux_weight, double z_weight) {
  prob_sum_grad_ = at::Tensor();
  z_grad_scale_ = 0;
  if (!recording()) return;
  const auto [C, L] = layer_sum(counts);
  const double tokens = token_mask.sum().item<double>();
  if (L == 0 || tokens == 0) return;
  const double LN = static_cast<double>(L) * tokens;
  if (aux_weight != 0) prob_sum_grad_ = C * (aux_weight * static_cast<double>(experts) / (LN * LN));
  z_grad_scale_ = z_weight * 2.0 / LN;
}

std::vector<std::pair<std::int64_t, std::vector<double>>> RouterRecord::expert_load() const {
  std::vector<std::pair<std::int64_t, std::vector<double>>> out;
  for (std::size_t l = 0; l < counts.size(); ++l) {
    if (!counts[l].defined()) continue;
    const auto share = (counts[l].to(at::kDouble) / std::max(1.0, counts[l].sum().item<double>())).contiguous();
    out.emplace_back(static_cast<std::int64_t>(l), std::vector<double>(share.data_ptr<double>(), share.data_ptr<double>() + share.numel()));
  }
  return out;
}

namespace {

struct RecordHolder : torch::CustomClassHolder {
  explicit RecordHolder(std::shared_ptr<RouterRecord> r) : record(std::move(r)) {}
  std::shared_ptr<RouterRecord> record;
};

// weights: the chosen experts' routing weights [N, k], passed through; prob_sum: this layer's
// S^l [E] (differentiable in the router's weight). Backward adds the auxiliary loss's gradient
// to S^l, known only once the whole forward has routed (RouterRecord::prob_sum_grad).
struct AuxGradient : public torch::autograd::Function<AuxGradient> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor weights, at::Tensor prob_sum, c10::intrusive_ptr<RecordHolder> holder) {
    (void)prob_sum;  // an input only so that its gradient is asked for
    ctx->saved_data["record"] = c10::IValue::make_capsule(holder);
    return weights.clone();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto holder = c10::static_intrusive_pointer_cast<RecordHolder>(ctx->saved_data["record"].toCapsule());
    at::Tensor g = holder->record->prob_sum_grad();
    if (g.defined()) g = g.to(grad_out[0].device());
    return {grad_out[0], g, at::Tensor()};
  }
};

// logits: a layer's router logits [N, E] fp32, passed through; masked_lse: lse(logits) of
// each token times its mask [N], detached. Backward adds the z-loss's gradient,
// scale · masked_lse · softmax(logits), with scale armed after the forward (RouterRecord::arm).
struct ZLossGradient : public torch::autograd::Function<ZLossGradient> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor logits, at::Tensor masked_lse, c10::intrusive_ptr<RecordHolder> holder) {
    ctx->save_for_backward({logits, masked_lse});
    ctx->saved_data["record"] = c10::IValue::make_capsule(holder);
    return logits.clone();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto holder = c10::static_intrusive_pointer_cast<RecordHolder>(ctx->saved_data["record"].toCapsule());
    const double scale = holder->record->z_grad_scale();
    at::Tensor g = grad_out[0];
    if (scale != 0) {
      const auto saved = ctx->get_saved_variables();
      g = g + scale * saved[1].unsqueeze(1) * at::softmax(saved[0], -1);
    }
    return {g, at::Tensor(), at::Tensor()};
  }
};

// rows [R, H] added into `tokens` zero rows at target [R] (int64): at::zeros().index_add(),
// whose derivative in LibTorch 1.13 keeps `rows` (for an expand_as) although the gradient
// needs only the index. Here only the index is kept: one [k n, H] tensor less per MoE layer
// (measured 96.5 -> 79.7 MB saved per layer on the Qwen3-MoE bench shape), same values.
struct ScatterAddRows : public torch::autograd::Function<ScatterAddRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, const at::Tensor& target, std::int64_t tokens) {
    ctx->save_for_backward({target});
    return at::zeros({tokens, rows.size(1)}, rows.options()).index_add_(0, target, rows);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto target = ctx->get_saved_variables()[0];
    return {grad_out[0].index_select(0, target), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

RouterImpl::RouterImpl(std::int64_t hidden, std::int64_t experts, at::ScalarType dtype, bool with_bias) {
  weight = register_parameter("weight", at::empty({experts, hidden}, at::TensorOptions().dtype(dtype)));
  if (with_bias) bias = register_parameter("bias", at::empty({experts}, at::TensorOptions().dtype(dtype)));
}

at::Tensor RouterImpl::forward(const at::Tensor& x) { return ops::linear_in(x, weight, bias, compute_dtype); }

SparseMoeImpl::SparseMoeImpl(const ModelConfig& c, at::ScalarType dtype, std::int64_t layer_, std::shared_ptr<RouterRecord> record_)
    : top_k(c.arch.moe.top_k), normalize(c.arch.moe.normalize_top_k), layer(layer_), record(std::move(record_)) {
  const MoeArchitecture& m = c.arch.moe;
  gate = register_module(c.arch.names.router, Router(c.hidden_size, m.experts, dtype, m.router_bias));
  if (m.clamped_stacked_experts) {
    stacked_experts = register_module("experts", StackedExperts(c, dtype));
  } else {
    experts = register_module("experts", torch::nn::ModuleList());
    for (std::int64_t e = 0; e < m.experts; ++e)
      experts->push_back(MLP(c.hidden_size, m.intermediate, c.arch.activation, dtype, c.arch.names));
  }
  if (m.shared_intermediate > 0) {
    ModuleNames dense = c.arch.names;  // the shared expert's projections carry the dense MLP's names
    dense.expert_gate = dense.gate;
    dense.expert_up = dense.up;
    dense.expert_down = dense.down;
    shared_expert = register_module(c.arch.names.shared_expert, MLP(c.hidden_size, m.shared_intermediate, c.arch.activation, dtype, dense));
    shared_expert_gate = register_module(c.arch.names.shared_expert_gate, Linear(c.hidden_size, 1, false, dtype));
  }
}

at::Tensor SparseMoeImpl::forward(const at::Tensor& x) {
  const auto routed = forward_routed(x);
  if (!shared_expert) return routed;
  return routed + at::sigmoid(shared_expert_gate->forward(x)) * shared_expert->forward(x);
}

at::Tensor SparseMoeImpl::forward_routed(const at::Tensor& x) {
  const auto H = x.size(-1);
  const auto flat = x.reshape({-1, H});
  const auto N = flat.size(0);
  const auto E = stacked_experts ? stacked_experts->gate_up_proj.size(0) : static_cast<std::int64_t>(experts->size());
  if (N == 0) return at::zeros_like(x);

  // Routing in fp32 (transformers: softmax with dtype=float), the chosen weights renormalised
  // when the family says, then cast to the activations' dtype for the combine.
  auto logits = gate->forward(flat).to(at::kFloat);  // [N, E]
  const bool recording = record && record->recording() && is_training();
  at::Tensor m;  // the counted tokens [N] while recording
  if (recording) {
    // Masked figures for the auxiliary and z losses; a recomputing backward writes the same values.
    const auto& mask = record->token_mask;
    TORCH_CHECK(mask.numel() == N, "router mask has ", mask.numel(), " tokens, the layer ", N);
    m = mask.to(logits.device());
    const auto masked_lse = at::logsumexp(logits.detach(), -1) * m;  // [N]
    const auto l = static_cast<std::size_t>(layer);
    if (l < record->z_sums.size()) record->z_sums[l] = (masked_lse * masked_lse).sum();
    if (record->z_loss_trains && at::GradMode::is_enabled() && logits.requires_grad())
      logits = ZLossGradient::apply(logits, masked_lse, c10::make_intrusive<RecordHolder>(record));
  }
  const auto probs = at::softmax(logits, -1);  // [N, E]
  auto [top, chosen] = probs.topk(top_k, -1);  // [N, k]
  if (normalize) top = top / top.sum(-1, /*keepdim=*/true);

  if (recording) {
    const auto slot_mask = m.unsqueeze(1).expand({N, top_k}).reshape({-1});
    auto counts = at::bincount(chosen.reshape({-1}), slot_mask, E).to(at::kFloat).detach();
    auto prob_sum = (probs * m.unsqueeze(1)).sum(0);  // [E]
    const auto l = static_cast<std::size_t>(layer);
    if (l < record->counts.size()) {
      record->counts[l] = counts;
      record->prob_sums[l] = prob_sum.detach();
    }
    record->experts = E;
    if (at::GradMode::is_enabled() && prob_sum.requires_grad())
      top = AuxGradient::apply(top, prob_sum, c10::make_intrusive<RecordHolder>(record));
  }
  const auto weights = top.to(x.scalar_type());

  // Dropless grouped compute: the N·k (token, expert) slots sorted by expert, each expert's
  // rows one contiguous slice of a single gather. split's backward is one concatenation (a
  // narrow per expert would zero-fill the whole buffer once per expert).
  const auto slots = chosen.reshape({-1});
  const auto order = slots.argsort(/*stable=*/true);
  const auto token = at::div(order, top_k, "floor");
  const auto sizes_t = at::bincount(slots, {}, E).cpu();
  const std::vector<std::int64_t> sizes(sizes_t.data_ptr<std::int64_t>(), sizes_t.data_ptr<std::int64_t>() + E);
  const auto sorted_weights = weights.reshape({-1}).index_select(0, order);
  const bool pad = row_padding == RowPadding::kAuto ? pads_expert_rows(x) : row_padding == RowPadding::kAlways;
  const auto padded = pad ? padded_expert_rows(sizes) : sizes;
  if (padded == sizes) {
    const auto rows = at::split_with_sizes(flat.index_select(0, token), sizes);
    const auto routed = run_experts(rows, sizes) * sorted_weights.unsqueeze(1);
    return ScatterAddRows::apply(routed, token, N).reshape(x.sizes());
  }
  // Padded slices: slot i of expert e moves to i + (e's padded offset - its offset); the rows
  // between read an appended zero row, whose expert output (zero, or the biases' for gpt-oss)
  // is added, with weight 0, to token 0. Their gradients are exact zeros too.
  std::vector<std::int64_t> shift(static_cast<std::size_t>(E));
  for (std::int64_t e = 0, off = 0, poff = 0; e < E; ++e) {
    shift[static_cast<std::size_t>(e)] = poff - off;
    off += sizes[static_cast<std::size_t>(e)];
    poff += padded[static_cast<std::size_t>(e)];
  }
  const auto total = std::accumulate(padded.begin(), padded.end(), std::int64_t{0});
  const auto index = at::TensorOptions().dtype(at::kLong).device(x.device());
  const auto pos = at::arange(N * top_k, index) +
                   at::repeat_interleave(at::tensor(shift, at::kLong), sizes_t).to(x.device());
  const auto source = at::full({total}, N, index).index_copy(0, pos, token);
  const auto target = at::zeros({total}, index).index_copy(0, pos, token);
  const auto padded_weights = at::zeros({total}, sorted_weights.options()).index_copy(0, pos, sorted_weights);
  const auto rows = at::split_with_sizes(at::constant_pad_nd(flat, {0, 0, 0, 1}).index_select(0, source), padded);
  const auto routed = run_experts(rows, padded) * padded_weights.unsqueeze(1);
  return ScatterAddRows::apply(routed, target, N).reshape(x.sizes());
}

at::Tensor SparseMoeImpl::run_experts(const std::vector<at::Tensor>& rows, const std::vector<std::int64_t>& sizes) {
  std::vector<at::Tensor> outs;
  outs.reserve(rows.size());
  for (std::size_t e = 0; e < rows.size(); ++e)
    if (sizes[e] > 0)
      outs.push_back(stacked_experts ? stacked_experts->forward(static_cast<std::int64_t>(e), rows[e]) : experts[e]->as<MLP>()->forward(rows[e]));
  return at::cat(outs);
}

bool pads_expert_rows(const at::Tensor& x) { return pads_expert_rows(x.device(), x.scalar_type()); }

bool pads_expert_rows(at::Device device, at::ScalarType compute) {
  // Reduced-precision GEMMs on CPU run in oneDNN, which JIT-compiles a primitive per shape and
  // caches up to 1024 of them. The routed row counts change every step, so unpadded, each
  // expert GEMM compiles anew: measured on a Qwen3-MoE LoRA bf16 step (32 experts, top 8,
  // hidden 512, 2048 tokens) 5.3 s a step unpadded, 2.85 s padded. fp32 GEMMs (BLAS) and GPU
  // ones compile nothing, and keep the exact counts.
  return device.is_cpu() && compute != at::kFloat && compute != at::kDouble;
}

namespace {
// A count of m rows is padded to a multiple of this: the smallest power of two above m / 32.
std::int64_t padding_quantum(std::int64_t m) {
  std::int64_t q = 1;
  while (q * 32 <= m) q *= 2;
  return q;
}
}  // namespace

std::vector<std::int64_t> padded_expert_rows(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> out(sizes);
  for (auto& m : out) {
    const std::int64_t q = padding_quantum(m);
    m = (m + q - 1) / q * q;
  }
  return out;
}

std::int64_t expected_padding_rows(std::int64_t routed, std::int64_t experts) {
  if (experts <= 0) return 0;
  return experts * (padding_quantum(routed / experts) - 1) / 2;
}

ActivationCost SparseMoeImpl::saved_activations(const ModelConfig& config, const ActivationShape& s) {
  const MoeArchitecture& m = config.arch.moe;
  const Term k = Term::num(m.top_k), E = Term::num(m.experts), Ie = Term::num(m.intermediate);
  const std::string& gate = config.arch.names.expert_gate;
  const std::string& up = config.arch.names.expert_up;
  const std::string& down = config.arch.names.expert_down;
  ActivationCost a;
  // The router: its input when its weight trains (projection_input of "gate"), the fp32
  // probabilities (softmax's output), the top-k indices (int64) and, renormalised, the k
  // weights and their sum.
  // With the z-loss training, its gradient keeps the fp32 logits and each token's masked lse.
  const Term router = s.projection_input("gate", s.H) + Term::num(4) * s.n * E + Term::num(8) * k * s.n +
                      (m.normalize_top_k ? Term::num(4) * (k + Term::num(1)) * s.n : Term()) +
                      (s.router_z_loss ? Term::num(4) * s.n * (E + Term::num(1)) : Term());
  // The experts see k n rows in all: each keeps what a dense MLP keeps of its rows (its
  // projections' inputs as the method needs them, gate and up for the GLU's backward). Padded
  // row counts (reduced precision on CPU) add the expected padding at the mean load
  // (expected_padding_rows: about 3% of the rows on the bench shape, a 512-row mean load).
  const Term rows = k * s.n + (s.padded_expert_rows ? Term::num(expected_padding_rows(k.value() * s.n.value(), m.experts)) : Term());
  const Term per_token =
      shared_projection_input(s, {gate.c_str(), up.c_str()}, s.H) + Term::num(2) * s.n * Ie * s.c + s.projection_input(down, Ie);
  const Term experts = m.clamped_stacked_experts ? StackedExpertsImpl::saved_per_row(s, s.H, Ie) * rows : per_token * rows / s.n;
  // The combine multiplies the expert outputs by their weights (both kept), and the gather,
  // reorder and scatter keep their int64 indices (order and token, k n each); the scatter
  // keeps only its index (ScatterAddRows).
  const Term combine = rows * s.H * s.c + rows * s.c + Term::num(16) * k * s.n;
  a.saved = router + experts + combine;
  a.parts = {"router (fp32 probabilities, top-k)",
             m.clamped_stacked_experts ? "k routed rows through clamped SwiGLU experts (I_e)" : "k routed rows through SwiGLU experts (I_e)",
             "combine (k n H)"};
  if (m.shared_intermediate > 0) {
    // The shared expert keeps what a dense MLP of its width keeps; its gate its input, and the
    // product sigmoid(gate) · out both factors (the [n, 1] sigmoid and the [n, H] output).
    const ModuleNames& n = config.arch.names;
    const Term S = Term::num(m.shared_intermediate);
    a.saved += shared_projection_input(s, {n.gate.c_str(), n.up.c_str(), n.shared_expert_gate.c_str()}, s.H) +
               Term::num(2) * s.n * S * s.c + s.projection_input(n.down, S) + s.n * (s.H + Term::num(1)) * s.c;
    a.parts.push_back("shared expert (I_s) and its gate");
  }
  return a;
}

}  // namespace ctune::model
