#include "train/forecast/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "model/quantize.h"
#include "train/parallel/zero.h"

namespace ctune::train {

namespace {

// The GEMM work of one token through the model, forward, by how backward treats it.
struct TokenFlops {
  double trained = 0;    // weights that train: backward computes the input's and the weight's gradient
  double frozen = 0;     // frozen weights (a LoRA base): backward computes the input's gradient only
  double adapters = 0;   // LoRA's A and B (trained)
  double attention = 0;  // scores and the weighted sum over the context
  double quantised_weights = 0;  // weights dequantised per forward (an int8/nf4 base)
  double per_layer_share = 0;    // the blocks' share of trained + frozen + adapters (what recomputes)
};

TokenFlops token_flops(const LedgerInputs& in) {
  const auto& cfg = in.config;
  const auto& moe = cfg.arch.moe;
  TokenFlops f;
  double block_flops = 0;
  bool head_seen = false;
  for (const auto& p : in.parameters) {
    if (!p.is_weight() || p.sizes.size() < 2) continue;
    const std::string module = p.module();
    if (module == "embed_tokens") continue;  // a lookup (a tied head is counted below)
    if (module == "gate" && moe.experts > 0) continue;  // the router: H x E, small
    head_seen = head_seen || module == "lm_head";
    // Experts: a token runs top_k of them.
    const bool expert = p.name.find("experts") != std::string::npos && moe.experts > 0;
    const double share = expert ? static_cast<double>(moe.top_k) / static_cast<double>(moe.experts) : 1.0;
    const double flops = 2.0 * static_cast<double>(p.numel()) * share;
    const ModuleTraining t = in.method->module(module);
    (t.weight_trains ? f.trained : f.frozen) += flops;
    const std::int64_t out = p.sizes[p.sizes.size() - 2], in_features = p.sizes.back();
    if (t.adapter_rank > 0) f.adapters += 2.0 * t.adapter_rank * static_cast<double>(out + in_features) * share * (p.numel() / (out * in_features));
    if (in.quantize_base && !t.weight_trains && model::is_quantized_module(p.name.substr(0, p.name.rfind('.'))))
      f.quantised_weights += static_cast<double>(p.numel());
    if (p.layer() >= 0) block_flops += flops;
  }
  if (!head_seen) {  // tied: the embedding matrix is the head
    const double flops = 2.0 * static_cast<double>(cfg.vocab_size) * static_cast<double>(cfg.hidden_size);
    (in.method->module("lm_head").weight_trains || in.method->module("embed_tokens").weight_trains ? f.trained : f.frozen) += flops;
  }
  // Causal attention: a query sees on average half the sequence (or its window).
  for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::int64_t w = cfg.arch.window(l);
    const double context = w > 0 && w < in.seq_len ? static_cast<double>(w) : static_cast<double>(in.seq_len) / 2.0;
    f.attention += 2.0 * 2.0 * static_cast<double>(cfg.num_attention_heads * cfg.head_dim) * context;
  }
  const double all = f.trained + f.frozen;
  f.per_layer_share = all > 0 ? block_flops / all : 0;
  return f;
}

// Bytes per element of the activations (fp32, or bf16/fp16).
double storage_bytes(const LedgerInputs& in) { return in.storage_dtype == at::kFloat ? 4.0 : 2.0; }

// The elements the optimizer updates: the weights that train and LoRA's A and B.
double trainable_elements(const LedgerInputs& in) {
  double trainable = 0;
  for (const auto& p : in.parameters) {
    const ModuleTraining t = in.method->module(p.module());
    if (t.weight_trains) trainable += static_cast<double>(p.numel());
    if (t.adapter_rank > 0 && p.is_weight() && p.sizes.size() == 2) trainable += static_cast<double>(t.adapter_rank * (p.sizes[0] + p.sizes[1]));
  }
  return trainable;
}

// Collectives: per call a fixed cost, and the ring volume per rank ((N - 1)/N of the tensor;
// twice for an all-reduce) at the rate measured through the run's own Gloo collectives
// (distributed/collective_rates.h), between two ranks; more ranks of one machine share it.
StepTime::Line collectives_line(const LedgerInputs& in, const distributed::World& world, const distributed::CollectiveRates& c,
                                double trainable, bool shared_cores) {
  const double accum = static_cast<double>(in.grad_accum);
  const double L = static_cast<double>(in.config.num_hidden_layers);
  const double r = storage_bytes(in);
  const double N = static_cast<double>(world.size);
  const double P = static_cast<double>(std::max<std::int64_t>(1, in.parameter_shards));
  const double ring = (N - 1.0) / N, ring_p = (P - 1.0) / P;
  const double grads = 4.0 * trainable;
  double stored = 0, trained_tensors = 0;
  bool frozen_weights = false;
  for (const auto& p : in.parameters) {
    const ModuleTraining t = in.method->module(p.module());
    stored += static_cast<double>(p.numel()) * (t.weight_trains ? 4.0 : r);
    trained_tensors += (t.weight_trains ? 1.0 : 0.0) + (t.adapter_rank > 0 && p.is_weight() ? 2.0 : 0.0);
    frozen_weights = frozen_weights || !t.weight_trains;
  }
  double seconds = 0;
  std::string what;
  if (in.parameter_shards > 1) {
    // Per micro-batch: every part (embedding, blocks, head) gathered for forward and again for
    // backward, a flat each for its trained and its frozen weights; each trained tensor's
    // gradient reduce-scattered as backward completes it; across nodes (hybrid) the shards'
    // gradients all-reduced.
    const double gathers = 2.0 * (L + 2.0) * (frozen_weights && trainable > 0 ? 2.0 : 1.0);
    seconds = accum * (c.all_gather.seconds(gathers, 2.0 * ring_p * stored) + c.reduce_scatter.seconds(trained_tensors, ring_p * grads));
    if (P < N) seconds += accum * c.all_reduce.seconds(trained_tensors, 2.0 * (N / P - 1.0) / (N / P) * grads / P);
    what = "per micro-batch: parts gathered forward and backward, each trained tensor's gradient reduce-scattered";
  } else if (in.optimizer_shards > 1) {
    // Its buckets (train/parallel/zero.h): reduce-scattered, then all-gathered updated.
    const double buckets = std::max(1.0, std::ceil(trainable / static_cast<double>(kBucketElements)));
    seconds = c.reduce_scatter.seconds(buckets, ring * grads) + c.all_gather.seconds(buckets, ring * 4.0 * trainable);
    what = std::to_string(kBucketElements * 4 / (1024 * 1024)) + " MiB buckets of gradients reduce-scattered, updated weights all-gathered";
  } else {
    seconds = c.all_reduce.seconds(2.0, 2.0 * ring * grads);
    what = "the gradients all-reduced as one flat tensor";
  }
  const double local = shared_cores ? std::max(1.0, static_cast<double>(world.local_size) / 2.0) : 1.0;
  return {"collectives", seconds * local,
          what + " / per-call cost and rate measured through Gloo between two ranks" +
              (c.all_gather.bytes_per_second > 0 ? "" : " (not measured on this machine: counted as free)")};
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 1 ? "%.1f ms" : "%.2f s", s < 1 ? s * 1e3 : s);
  return buf;
}

}  // namespace

StepTime estimate_step_time(const LedgerInputs& in, const distributed::World& world, const MachineRates& rates, bool shared_cores) {
  StepTime st;
  const auto& cfg = in.config;
  const double n = static_cast<double>(in.batch_size * in.seq_len);  // tokens of one micro-batch
  const double accum = static_cast<double>(in.grad_accum);
  // The ranks of one machine share the cores the rates were measured with.
  const double share = shared_cores ? static_cast<double>(std::max(1, world.local_size)) : 1.0;
  const at::ScalarType dtype = in.compute_dtype == at::kBFloat16 ? at::kBFloat16 : at::kFloat;
  const double gemm = rates.gemm(dtype, static_cast<std::int64_t>(n)) / share;
  const double attention_rate = rates.gemm(dtype, std::min<std::int64_t>(in.seq_len, 256)) / share;  // per-head batched GEMMs
  const double bandwidth = rates.memory_bandwidth / share;
  const TokenFlops f = token_flops(in);

  // Recomputation: the blocks that checkpoint run their forward again in backward.
  const double L = static_cast<double>(cfg.num_hidden_layers);
  double recompute_layers = 0;
  for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) recompute_layers += in.recompute.recompute_block(l) ? 1.0 : 0.0;
  const bool selective = in.recompute.mode == model::RecomputePolicy::Mode::selective;
  const double recompute_share = selective ? 0.0 : (L > 0 ? recompute_layers / L : 0.0);

  const double forward = n * (f.trained + f.frozen + f.adapters);
  const double backward = n * (2.0 * f.trained + f.frozen + 2.0 * f.adapters);
  const double recompute = n * (f.trained + f.frozen + f.adapters) * f.per_layer_share * recompute_share;
  // Blocked attention recomputes each block's probabilities in backward: 2.5x the forward's
  // GEMMs (scores again, then the gradients of V, the probabilities, Q and K); kept scores: 2x.
  const double attn_backward = in.recompute.blocked_attention ? 2.5 : 2.0;
  const double attn_recompute = selective || recompute_share > 0 ? 1.0 : 0.0;
  const double attention = n * f.attention * (1.0 + attn_backward + attn_recompute * (selective ? 1.0 : recompute_share));

  // Element-wise work (norms, RoPE, the GLU, residual adds, casts), forward and backward: about
  // three passes over a layer's activations per token; the loss: three passes over a chunk's
  // logits (six when the full logits are kept: log-softmax, its gradient, the casts).
  const double r = storage_bytes(in);
  const double H = static_cast<double>(cfg.hidden_size), I = static_cast<double>(cfg.mlp_width());
  const double qkv = static_cast<double>((cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim);
  const double elementwise_bytes = 3.0 * n * L * r * (12.0 * H + 4.0 * I + 2.0 * qkv) * (1.0 + recompute_share);
  const double loss_bytes = (in.chunked_loss ? 3.0 : 6.0) * n * static_cast<double>(cfg.vocab_size) * 4.0;

  // Operators: each costs its dispatch, graph node and engine hop beyond its arithmetic; about
  // 100 per block forward and backward, a dozen per attention block of 128 queries, and the
  // head and loss per chunk.
  const double query_blocks = static_cast<double>((in.seq_len + 127) / 128);
  const double ops = L * (100.0 + 12.0 * query_blocks * static_cast<double>(in.batch_size)) * (1.0 + recompute_share) + 30.0;

  auto micro = [&](double seconds) { return accum * seconds; };
  st.lines.push_back({"operators", micro(ops * rates.op_seconds), "about L x (100 + 12 x query blocks x B) operators x measured seconds per operator"});
  st.lines.push_back({"matmuls forward", micro(forward / gemm), "n x GEMM FLOPs per token / GEMM rate (" + std::string(at::toString(dtype)) + ")"});
  st.lines.push_back({"matmuls backward", micro(backward / gemm), "trained weights 2x, frozen 1x (input gradient only), adapters 2x"});
  st.lines.push_back({"recompute", micro(recompute / gemm), "the checkpointed blocks' forward again"});
  st.lines.push_back({"attention", micro(attention / attention_rate), "4 nh d x context per token, forward + backward (+ recompute)"});
  st.lines.push_back({"element-wise and loss", micro((elementwise_bytes + loss_bytes) / bandwidth),
                      "activation and logit bytes passed through memory / copy bandwidth"});
  if (in.quantize_base) {
    const double rate = (in.quantize_base->kind == quant::QuantSpec::Int8 ? rates.dequant_int8 : rates.dequant_nf4) / share;
    const double passes = 2.0 + recompute_share;  // forward, backward (input gradient), recompute
    st.lines.push_back({"dequantisation", micro(f.quantised_weights * passes / std::max(rate, 1.0)),
                        "quantised weights x (forward + backward + recompute) / dequantisation rate"});
  }
  // The optimizer: one pass over this rank's share of the trainable state (fp32 weight,
  // gradient, two moments; read and written).
  const double trainable = trainable_elements(in);
  const double shards = static_cast<double>(std::max<std::int64_t>(1, in.optimizer_shards));
  const double state_bytes = (in.optimizer == "adamw" ? 16.0 : 12.0) * 2.0 * trainable / shards;
  st.lines.push_back({"optimizer", state_bytes / bandwidth, "2 x (weight + gradient + state) bytes of this rank's share / copy bandwidth"});

  if (world.size > 1) st.lines.push_back(collectives_line(in, world, rates.collectives, trainable, shared_cores));
  if (in.cpu_offload) {
    double stored = 0;
    for (const auto& p : in.parameters) stored += static_cast<double>(p.numel()) * 4.0;
    const double P = static_cast<double>(std::max<std::int64_t>(1, in.parameter_shards));
    st.lines.push_back({"offload", (accum * 2.0 * stored / P + 8.0 * trainable / P) / bandwidth,
                        "shards copied to the device per micro-batch and gradients back / copy bandwidth"});
  }
  for (const auto& l : st.lines) st.step_seconds += l.seconds;
  st.tokens_per_step = n * accum * static_cast<double>(world.size);
  return st;
}

std::string StepTime::to_text() const {
  std::ostringstream s;
  for (const auto& l : lines) {
    if (l.seconds <= 0) continue;
    char row[64];
    std::snprintf(row, sizeof row, "%-22s %10s  ", l.name.c_str(), seconds_text(l.seconds).c_str());
    s << row << l.formula << "\n";
  }
  char tail[96];
  std::snprintf(tail, sizeof tail, "%-22s %10s  %.0f tokens/s\n", "step", seconds_text(step_seconds).c_str(), tokens_per_second());
  s << tail;
  return s.str();
}

}  // namespace ctune::train
