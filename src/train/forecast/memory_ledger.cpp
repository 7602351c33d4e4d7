#include "train/forecast/memory_ledger.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#include "core/term.h"
#include "model/activation_cost.h"
#include "model/decoder.h"
#include "model/quantize.h"
#include "ops/attention.h"
#include "ops/attention_tiled.h"
#include "ops/compute.h"
#include "ops/tensor_pool.h"
#include "quant/storage_bytes.h"
#include "train/parallel/zero.h"
#include "train/step/chunked_loss.h"

namespace ctune::train {

namespace {

std::int64_t bytes_of(at::ScalarType t) { return static_cast<std::int64_t>(c10::elementSize(t)); }


// The run's symbols: their values, in the order the ledger's table lists them.
struct Symbols {
  std::vector<std::pair<std::string, std::int64_t>> values;
  Term operator()(const std::string& name, std::int64_t value) {
    // A symbol two parts of the ledger read (th: the attention's tiles in training and in the
    // generation's prompt pass) is listed once.
    const auto listed = [&](const auto& v) { return v.first == name && v.second == value; };
    if (std::none_of(values.begin(), values.end(), listed)) values.emplace_back(name, value);
    return Term::sym(name, value);
  }
};

// The shapes and dtypes every term is written in: what the blocks' activation terms read
// (B, T, n, H, I, nh, nkv, d, c, r, dropout), plus the layer count and vocabulary.
struct Shape : model::ActivationShape {
  Term L, V;
};

Shape shape_symbols(const LedgerInputs& in, Symbols& sym) {
  const auto& cfg = in.config;
  // Residual-stream bytes (r): the weights' storage dtype (full fine-tuning keeps fp32 masters,
  // a LoRA base is stored in the compute dtype). Matmul bytes (c): the compute dtype, or in fp32
  // precision whatever the weights are stored in. When r != c every matmul input is a fresh cast.
  const std::int64_t rb = bytes_of(in.storage_dtype);
  const std::int64_t cb = in.compute_dtype != at::kFloat ? bytes_of(in.compute_dtype) : rb;
  Shape s;
  s.B = sym("B", in.batch_size);
  s.T = sym("T", in.seq_len);
  s.n = sym("n", in.batch_size * in.seq_len);
  s.H = sym("H", cfg.hidden_size);
  s.I = sym("I", cfg.intermediate_size);
  s.L = sym("L", cfg.num_hidden_layers);
  s.V = sym("V", cfg.vocab_size);
  s.nh = sym("nh", cfg.num_attention_heads);
  s.nkv = sym("nkv", cfg.num_key_value_heads);
  s.d = sym("d", cfg.head_dim);
  s.c = sym("c", cb);
  s.r = sym("r", rb);
  s.dropout = std::any_of(in.parameters.begin(), in.parameters.end(),
                          [&](const model::ParameterShape& p) { return in.method->module(p.module()).adapter_dropout > 0; });
  return s;
}

// Bytes of one frozen projection weight as stored.
std::int64_t frozen_weight_bytes(const std::optional<quant::QuantSpec>& q, at::ScalarType storage, std::int64_t rows, std::int64_t cols) {
  if (!q) return rows * cols * bytes_of(storage);
  if (q->kind == quant::QuantSpec::Int8) return quant::int8_weight_bytes(rows, cols);
  return quant::nf4_weight_bytes(rows * cols, q->blocksize, q->double_quant);
}

// The parameters, counted per module as the method trains them: frozen bytes as stored, the
// trainable elements (fp32 masters and adapters), and per part (embedding, each block, final
// norm and head), one of which is whole at a time under full_shard.
struct StateCount {
  std::int64_t frozen = 0, trainable = 0, largest_trainable = 0, unsharded = 0, largest_part = 0, largest_part_trainable = 0;
};

StateCount count_state(const LedgerInputs& in) {
  const Method& method = *in.method;
  const std::int64_t sb = bytes_of(in.storage_dtype);
  StateCount s;
  // Parts: the embedding (0), each block (1 + layer), the final norm and head (last).
  struct Part {
    std::int64_t frozen = 0, trainable = 0;
  };
  std::vector<Part> parts(static_cast<std::size_t>(in.config.num_hidden_layers) + 2);
  for (const auto& p : in.parameters) {
    const std::string module = p.module();
    const ModuleTraining training = method.module(module);
    Part& part = module == "embed_tokens" ? parts.front() : p.layer() >= 0 ? parts[1 + p.layer()] : parts.back();
    const std::int64_t count = p.numel();
    if (training.weight_trains) {
      s.trainable += count;
      part.trainable += count;
      s.largest_trainable = std::max(s.largest_trainable, count);
    } else {
      const bool quantised =
          in.quantize_base && p.is_weight() && p.sizes.size() == 2 && model::is_quantized_module(p.name.substr(0, p.name.rfind('.')));
      const std::int64_t bytes = quantised ? frozen_weight_bytes(in.quantize_base, in.storage_dtype, p.sizes[0], p.sizes[1]) : count * sb;
      s.frozen += bytes;
      part.frozen += bytes;
      if (quantised) s.unsharded += bytes;  // a quantised base is kept whole
    }
    // A LoRA adapter beside a Linear's weight [out, in]: A [r, in] and B [out, r].
    if (training.adapter_rank > 0 && p.is_weight() && p.sizes.size() == 2) {
      const std::int64_t adapter = training.adapter_rank * (p.sizes[0] + p.sizes[1]);
      s.trainable += adapter;
      part.trainable += adapter;
      s.largest_trainable = std::max(s.largest_trainable, training.adapter_rank * std::max(p.sizes[0], p.sizes[1]));
    }
  }
  // A part whole: its frozen bytes (a quantised base's stay whole anyway) and fp32 trainables;
  // the head part of a tied model also uses the embedding matrix.
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::int64_t bytes = parts[i].frozen + 4 * parts[i].trainable, trainable = parts[i].trainable;
    if (i + 1 == parts.size() && in.config.tie_word_embeddings) {
      bytes += parts[0].frozen + 4 * parts[0].trainable;
      trainable += parts[0].trainable;
    }
    s.largest_part = std::max(s.largest_part, bytes);
    s.largest_part_trainable = std::max(s.largest_part_trainable, trainable);
  }
  return s;
}

// Weights, gradients and optimizer state (and under full_shard what is whole for a while), as
// terms. A weight that trains is an fp32 master with a gradient and optimizer state; a frozen
// one is stored as it is; adapters train in fp32.
struct StateTerms {
  Term weights, gathered, grads, gathered_grads, optimizer, whole_weights, unsharded, trainable, largest, shards;
  std::int64_t opt_per_param = 0;
  bool sharded_params = false;
};

StateTerms state_lines(const LedgerInputs& in, Symbols& sym, Ledger& led) {
  const StateCount count = count_state(in);
  StateTerms t;
  const Term F = sym("F", count.frozen), N = sym("N", count.trainable), P = sym("P", in.parameter_shards),
             S = sym("S", in.optimizer_shards), four = Term::num(4);
  t.trainable = N;
  t.shards = S;
  t.sharded_params = in.parameter_shards > 1;
  t.unsharded = t.sharded_params && count.unsharded > 0 ? sym("U", count.unsharded) : Term();
  t.whole_weights = F + four * N;
  t.weights = t.sharded_params ? Term::ceil_div(t.whole_weights - t.unsharded, P) + t.unsharded : t.whole_weights;
  const Term part = t.sharded_params ? sym("Wpart", count.largest_part) : Term();
  const Term largest = sym("Nmax", count.largest_trainable);
  t.largest = largest;
  t.gathered = t.sharded_params ? Term::num(in.prefetch ? 2 : 1) * part : Term();
  t.grads = in.optimizer_shards > 1 && t.sharded_params ? Term::ceil_div(four * N, S) : four * N;
  // Each parameter's gradient is reduce-scattered as soon as it is whole; with experts a part's
  // gradients are, together, after its backward (train/parallel/full_shard.h).
  const bool by_part = in.config.arch.moe.experts > 0;
  t.gathered_grads = !t.sharded_params ? Term() : by_part ? four * sym("Npart", count.largest_part_trainable) : four * largest;
  t.opt_per_param = in.optimizer == "adamw" ? 8 : (in.momentum > 0 ? 4 : 0);
  // Sharded (train/parallel/zero.h): each rank keeps the state of its 1/S of the trainable elements.
  t.optimizer = Term::num(t.opt_per_param) * Term::ceil_div(N, S);

  const std::string pool = in.cpu_offload ? "host" : "device";
  const std::string frozen_note =
      count.frozen == 0 ? std::string()
                        : "F: frozen weights" + std::string(in.quantize_base ? in.quantize_base->kind == quant::QuantSpec::Int8
                                                                                   ? ", projections int8 (out*in + 4*out)"
                                                                                   : ", projections nf4 (n/2 + block scales)"
                                                                             : " at r B/param") +
                              "; ";
  led.lines.push_back({"weights", t.weights.value(), t.weights.text(),
                       frozen_note + "N: trainable parameters (fp32 masters, adapters)" +
                           (t.sharded_params ? std::string(", P ranks share them") + (count.unsharded > 0 ? " (U: the quantised base, kept whole)" : "")
                                             : ""),
                       pool});
  if (t.sharded_params) {
    led.lines.push_back({"gathered", t.gathered.value(), t.gathered.text(),
                         std::string(in.prefetch ? "two of the largest part (this one and the next, prefetched)" : "the largest part") +
                             " (embedding, block, or norm and head) whole while it computes"});
  }
  led.lines.push_back({"gradients", t.grads.value(), t.grads.text(), "fp32, of the trainable parameters",
                       t.sharded_params ? pool : "device"});
  if (t.sharded_params) {
    led.lines.push_back({"gathered grads", t.gathered_grads.value(), t.gathered_grads.text(),
                         by_part ? "the largest part's trainable gradients (Npart) whole until reduce-scattered after its backward"
                                 : "the largest trainable parameter's gradient (Nmax) whole until reduce-scattered"});
  }
  led.lines.push_back({"optimizer state", t.optimizer.value(), t.optimizer.text(),
                       in.optimizer + (in.optimizer_shards > 1 ? ", S ranks share it" : ""), pool});
  return t;
}

// Mixed precision over fp32 master weights (full fine-tuning in bf16/fp16): each matmul casts its
// weight to the compute dtype, and autograd keeps that copy until the layer's backward (the input's
// gradient reads it). A layer that recomputes casts again in backward and keeps none. The head's
// copy is the loss line's.
Term compute_copy_line(const LedgerInputs& in, const Shape& s, Symbols& sym, Ledger& led) {
  if (in.compute_dtype == at::kFloat || in.compute_dtype == in.storage_dtype) return Term();
  std::int64_t kept = 0;
  for (const auto& p : in.parameters) {
    if (p.layer() >= 0 && p.is_weight() && p.sizes.size() == 2 && in.method->module(p.module()).weight_trains &&
        !in.recompute.recompute_block(p.layer()))
      kept += p.numel();
  }
  if (kept == 0) return Term();
  const Term copies = s.c * sym("Nc", kept);
  led.lines.push_back({"compute copies", copies.value(), copies.text(),
                       "Nc: trainable matmul weights of the layers that keep their activations, cast to the compute dtype and kept for backward"});
  return copies;
}

// A tied head whose matrix trains (full fine-tuning of a tied model) gets two gradients: the
// loss's, taken first and held by autograd until the embedding's arrives at the very end of
// backward, and the embedding's; LibTorch 1.13's autograd adds them out of place (later versions
// add in place when they can: then this over-counts by one copy), so for a moment the matrix has
// three gradients, two more than the gradients line counts. Unsharded runs only: under full_shard
// the embedding and head parts reduce-scatter their gradients as they come.
Term tied_gradient_line(const LedgerInputs& in, const StateTerms& st, const Shape& s, Symbols& sym, Ledger& led) {
  const bool trains = std::any_of(in.parameters.begin(), in.parameters.end(), [&](const model::ParameterShape& p) {
    return p.module() == "embed_tokens" && p.is_weight() && in.method->module(p.module()).weight_trains;
  });
  if (!in.config.tie_word_embeddings || !trains || st.sharded_params) {
    led.lines.push_back({"tied gradients", 0, "0",
                         !in.config.tie_word_embeddings ? "none: the head is not tied to the embedding"
                         : !trains                      ? "none: the tied matrix does not train"
                                                        : "none: sharded parameters reduce each gradient as it comes"});
    return Term();
  }
  const Term extra = Term::num(2) * Term::num(4) * s.V * s.H;
  led.lines.push_back({"tied gradients", extra.value(), extra.text(),
                       "at backward's end: the head's fp32 gradient, held since the loss, and its sum with the embedding's (the gradients line counts one)"});
  return extra;
}

// Activations kept for backward by one decoder layer without recompute (the blocks state them,
// model/activation_cost.h), and what the run keeps of them; adapted from Korthikanti et al.'s
// per-layer accounting (docs/formats.md#memory-formulas).
struct ActivationTerms {
  Term total, scores, layer, recomputed_transient;
  Term backward_workspace;  // the largest layer kind's backward workspace (model/activation_cost.h)
  // What the layers keep when the last layer with a backward workspace runs its backward: the
  // layers after it are through backward, and it has freed its MLP's saving.
  Term kept_at_workspace;
  Term kept_by_layers;  // of the total, what the decoder layers keep (no final norm, loss input or workspace)
};

// The layers of one kind (dense or sparse MLP; attention or Gated DeltaNet): what one saves,
// how many there are and how many of them recompute, and the symbol counting the rest.
struct LayerKind {
  model::ActivationCost cost;
  std::int64_t layers = 0, recomputed = 0;
  std::int64_t kept_after_workspace = 0;  // its layers that keep everything, after the last with a backward workspace
  std::string name, symbol;
};

// Whether backward runs through `layer`: some parameter at or below it trains (its weight or an
// adapter), or the embedding does. Above the first such layer nothing asks for a gradient.
bool backward_reaches(const LedgerInputs& in, std::int64_t layer) {
  for (const auto& p : in.parameters) {
    const std::int64_t l = p.layer();
    if (l > layer || (l < 0 && p.module() != "embed_tokens")) continue;
    const ModuleTraining t = in.method->module(p.module());
    if (t.weight_trains || t.adapter_rank > 0) return true;
  }
  return false;
}

std::vector<LayerKind> layer_kinds(const LedgerInputs& in, const model::ActivationShape& shape) {
  const auto& arch = in.config.arch;
  const auto L = in.config.num_hidden_layers;
  bool sparse_mixed = false, linear_mixed = false;
  for (std::int64_t l = 1; l < L; ++l) {
    sparse_mixed |= arch.moe.sparse(l) != arch.moe.sparse(0);
    linear_mixed |= arch.linear.layer(l) != arch.linear.layer(0);
  }
  // Sparse before dense, DeltaNet before attention: the ledger's terms in a fixed order.
  // Below the first layer backward reaches no input and no weight asks for a gradient: those
  // layers keep nothing (their operations record no graph). When it reaches none (only the head
  // trains), every layer is counted, an overcount.
  std::int64_t first = 0;
  while (first < L && !backward_reaches(in, first)) ++first;
  if (first == L) first = 0;
  std::map<std::pair<bool, bool>, LayerKind, std::greater<>> by_key;
  for (std::int64_t l = first; l < L; ++l) {
    const std::pair<bool, bool> key{arch.moe.sparse(l), arch.linear.layer(l)};
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      LayerKind kind;
      kind.cost = model::DecoderLayerImpl::saved_activations(in.config, shape, l);
      kind.symbol = std::string("L") + (sparse_mixed ? (key.first ? "s" : "d") : "") + (linear_mixed ? (key.second ? "g" : "a") : "");
      if (kind.symbol == "L" && first > 0) kind.symbol = "Lb";  // the layers backward reaches
      kind.name = std::string(sparse_mixed ? (key.first ? "sparse" : "dense") : "") + (sparse_mixed && linear_mixed ? " " : "") +
                  (linear_mixed ? (key.second ? "DeltaNet" : "attention") : "");
      it = by_key.emplace(key, std::move(kind)).first;
    }
    ++it->second.layers;
    it->second.recomputed += in.recompute.recompute_block(l);
  }
  std::int64_t last = -1;  // the last layer whose backward needs a workspace (a DeltaNet's)
  for (std::int64_t l = 0; l < L; ++l)
    if (arch.linear.layer(l)) last = l;
  for (std::int64_t l = last + 1; last >= 0 && l < L; ++l)
    if (!in.recompute.recompute_block(l) && l >= first) ++by_key[{arch.moe.sparse(l), arch.linear.layer(l)}].kept_after_workspace;
  // No DeltaNet backward runs when nothing at or below the last one trains (LoRA on the
  // attention of a model whose only attention layers come last).
  if (last >= 0 && !backward_reaches(in, last))
    for (auto& [key, kind] : by_key) kind.cost.backward_workspace = Term();
  std::vector<LayerKind> kinds;
  for (auto& [key, kind] : by_key) kinds.push_back(std::move(kind));
  return kinds;
}

ActivationTerms activation_lines(const LedgerInputs& in, const Shape& s, Symbols& sym, Ledger& led) {
  const Method& method = *in.method;
  model::ActivationShape shape = s;
  shape.blocked = in.recompute.blocked_attention;
  shape.router_z_loss = in.router_z_loss;
  shape.padded_expert_rows = in.padded_expert_rows;
  shape.tiled_attention = in.recompute.blocked_attention && in.tiled_attention;
  shape.block_rows = sym("bq", std::min<std::int64_t>(shape.tiled_attention ? ops::kTileQueries : ops::kBlockQueries, s.T.value()));
  shape.gated_delta_kernel = in.gated_delta_kernel;
  if (shape.tiled_attention || shape.gated_delta_kernel) shape.threads = sym("th", in.threads);
  shape.projection_input = [&](const std::string& name, const Term& in_dim) {
    // The base keeps its input when its weight trains; an adapter keeps its (dropped-out) input,
    // which without dropout is the very tensor the base sees; and its rank-r intermediate.
    const ModuleTraining m = method.module(name);
    Term b = m.weight_trains ? s.c * s.n * in_dim : Term();
    if (m.adapter_rank > 0) {
      b += (m.adapter_dropout > 0 ? Term::num(2) * s.c * s.n * in_dim : (m.weight_trains ? Term() : s.c * s.n * in_dim)) +
           s.c * s.n * Term::num(m.adapter_rank);
    }
    return b;
  };
  // Layers of different kinds save different amounts: a model with experts may mix dense and
  // sparse MLPs (Qwen3-MoE's mlp_only_layers), a hybrid attention and Gated DeltaNet layers
  // (Qwen3.5). Each kind states its own saving, counted over the layers of that kind.
  const std::vector<LayerKind> kinds = layer_kinds(in, shape);
  std::size_t largest = 0;
  std::int64_t recomputing = 0;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    recomputing += kinds[k].recomputed;
    if (kinds[k].cost.saved.value() > kinds[largest].cost.saved.value()) largest = k;
  }
  const model::ActivationCost& layer = kinds[largest].cost;
  ActivationTerms a;
  a.scores = layer.scores;
  a.layer = layer.saved;  // the largest kind's
  led.activations_per_layer = a.layer.value();

  const Term Lr = sym("Lr", recomputing);
  const bool selective = in.recompute.attention_kernel() == ops::AttentionKernel::recomputed && recomputing == 0;
  const auto kept_by = [&](const model::ActivationCost& c) { return selective ? c.saved - c.scores : c.saved; };
  Term kept;
  std::string others;
  if (kinds.size() > 1 || kinds[0].layers != in.config.num_hidden_layers) {
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      const LayerKind& kind = kinds[k];
      kept += sym(kind.symbol, kind.layers - kind.recomputed) * kept_by(kind.cost);
      if (k != largest) others += "; " + kind.symbol + " " + kind.name + " layers keep " + format_mb(kind.cost.saved.value());
    }
    if (recomputing > 0) kept += Lr * s.r * s.n * s.H;
  } else if (recomputing > 0) {
    kept = (s.L - Lr) * a.layer + Lr * s.r * s.n * s.H;  // a recomputed layer keeps only its input
  } else {
    kept = s.L * kept_by(layer);
  }
  if (recomputing > 0) a.recomputed_transient = a.layer;
  a.kept_by_layers = kept;
  // One layer's transient workspace at a time: the largest of any kind's.
  Term workspace = layer.workspace;
  for (const LayerKind& kind : kinds) {
    if (kind.cost.workspace.value() > workspace.value()) workspace = kind.cost.workspace;
    if (kind.cost.backward_workspace.value() > a.backward_workspace.value()) a.backward_workspace = kind.cost.backward_workspace;
  }
  a.total = kept + model::DecoderImpl::saved_outside_layers(in.config, shape) + workspace;
  if (a.backward_workspace.value() > 0) {
    a.kept_at_workspace = kept;
    for (const LayerKind& kind : kinds) {
      if (kind.kept_after_workspace > 0) a.kept_at_workspace = a.kept_at_workspace - Term::num(kind.kept_after_workspace) * kept_by(kind.cost);
      if (kind.cost.backward_workspace.value() > 0 && kind.layers > kind.recomputed) a.kept_at_workspace = a.kept_at_workspace - kind.cost.freed_before_mixer;
    }
  }
  std::string note = (kinds.size() > 1 ? "per " + kinds[largest].name + " layer (" + kinds[largest].symbol + " of them" + others + ") "
                                       : std::string("per layer ")) +
                     format_mb(a.layer.value()) + ": ";
  for (std::size_t i = 0; i < layer.parts.size(); ++i) note += (i ? ", " : "") + layer.parts[i];
  if (recomputing > 0) {
    note += "; Lr of L layers keep only their input (r n H) and recompute";
  } else if (in.recompute.attention_kernel() == ops::AttentionKernel::recomputed) {
    note += "; selective: the attention scores are recomputed";
  }
  note += "; then the final norm, the loss input" + std::string(shape.blocked ? ", the attention mask B T^2 and one attention block's workspace (bq query rows)" : "");
  led.lines.push_back({"activations", a.total.value(), a.total.text(), note});
  return a;
}

// Logits and loss buffers: the largest moment is the loss's backward. Chunked, the rows per
// chunk are the loss's own choice (train/step/chunked_loss.h).
// The rows of one chunk of the chunked loss (the head's GEMMs run on as many at a time).
Term loss_rows(const Shape& s, Symbols& sym) {
  return sym("rows", std::min<std::int64_t>(s.n.value(), default_chunk_rows(s.V.value(), s.c.value())));
}

Term loss_line(const LedgerInputs& in, const Shape& s, Symbols& sym, Ledger& led) {
  const ModuleTraining head = in.method->module("lm_head");
  const bool head_trains = head.weight_trains || head.adapter_rank > 0;
  const Term VH = s.V * s.H;
  if (in.chunked_loss && head.adapter_rank == 0) {
    const Term rows = loss_rows(s, sym);
    // A chunk's logits and their gradient in the matmul dtype; the weight cast to it once for all
    // chunks when stored wider (fp32 masters); the head's fp32 gradient accumulator, and, when
    // the matmul dtype is narrower and its GEMM cannot write fp32, one chunk's share of it in
    // that dtype, added a slice of rows at a time (its fp32 copy); an fp32 share, or a bf16 one
    // oneDNN writes in fp32, is accumulated inside the GEMM (train/step/chunked_loss.h).
    const bool cast = s.r.value() != s.c.value();
    const bool narrow_share = s.c.value() < 4 && !in.fp32_weight_grads;
    const Term t = rows * s.V * Term::num(2) * s.c + (cast ? s.c * VH : Term()) +
                   (head_trains ? Term::num(4) * VH + (narrow_share ? s.c * VH + Term::ceil_div(Term::num(4) * VH, Term::num(kHeadGradSlices)) : Term())
                                : Term());
    led.lines.push_back({"logits and loss", t.value(), t.text(),
                         "chunked: one chunk of rows, its logits and their gradient" + std::string(cast ? ", the head cast to the matmul dtype" : "") +
                             std::string(head_trains ? ", the head gradient's fp32 accumulator" : "") +
                             std::string(head_trains && narrow_share ? ", one chunk's share in the matmul dtype and a slice of it in fp32" : "")});
    return t;
  }
  const Term t = s.n * s.V * (Term::num(4 + 8) + s.c) + (head_trains ? Term::num(4) * VH : Term());
  led.lines.push_back({"logits and loss", t.value(), t.text(),
                       "full logits: saved log-softmax, its gradient, the head output" + std::string(head_trains ? ", the head gradient" : "")});
  return t;
}

// An objective that generates (train/objective/rollout.h): the generation's moment (its KV cache
// over every sequence sampled together, the prompt pass's transient as the generation view
// counts it, and under sharded parameters the whole policy gathered for it) and what the rollout
// keeps through its steps (the batches' ids, labels, positions and segments, and the kept
// log-probability tables). Both zero without generation.
struct RolloutTerms {
  Term generation, kept;
};
RolloutTerms rollout_lines(const LedgerInputs& in, const Shape& s, const Term& gathered_whole, Symbols& sym, Ledger& led) {
  const Term kv_training = model::KVCache::model_bytes(in.config, s.L, s.nkv, s.d, s.T, s.B, s.c);
  if (in.generated_rows == 0) {
    led.lines.push_back({"KV cache", 0, "0", "none in training (generation at this batch and length: " + kv_training.text() + " = " + format_mb(kv_training.value()) + ")"});
    return {};
  }
  const Term G = sym("Bg", in.generated_rows), N = sym("Nnew", in.new_tokens), P = sym("Tp", in.prompt_tokens);
  const Term kv = model::KVCache::model_bytes(in.config, s.L, s.nkv, s.d, P + N, G, s.c);
  led.lines.push_back({"KV cache", kv.value(), kv.text(),
                       "the rollout's generation: Bg sequences sampled together, prompt and new tokens, KV heads only (freed before the step's forward)"});
  const Term four = Term::num(4);
  const PromptPass pass{.prompts = sym("Bp", in.generated_prompts), .logit_rows = G, .P = P, .H = s.H, .I = s.I, .V = s.V, .nh = s.nh,
                        .nkv = s.nkv, .d = s.d, .c = s.c, .threads = in.tiled_prefill ? sym("th", in.threads) : Term(),
                        .tiled = in.tiled_prefill};
  const Term prefill = prompt_pass_bytes(pass);
  led.lines.push_back({"generation prefill", prefill.value(), prefill.text(),
                       "the prompts' forward pass, once per distinct prompt (Bp): " + prompt_pass_note(pass) + "; the last logits of all Bg" +
                           std::string(gathered_whole.value() > 0 ? "; the whole policy gathered for it (sharded parameters)" : "")});
  if (in.kept_rows == 0 && in.kept_logps == 0) return {kv + prefill + gathered_whole, Term()};  // sampled and trained at once (distill)
  const Term kept = sym("Bk", in.kept_rows) * s.T * Term::num(in.shared_prompt ? 40 : 28) +
                    (in.kept_logps > 0 ? Term::num(in.kept_logps) * G * N * four : Term());
  led.lines.push_back({"rollout batches", kept.value(), kept.text(),
                       "kept through the generation batch's steps: ids, labels, positions (8 B each), segments (4 B) per token" +
                           std::string(in.shared_prompt ? ", and prefix (4 B) and sequence (8 B) ids: a group's completions share their prompt's row" : "") +
                           std::string(in.kept_logps > 0 ? ", and " + std::to_string(in.kept_logps) + " fp32 log-probability table(s) per new token (old policy, reference)" : "")});
  return {kv + prefill + gathered_whole, kept};
}

// On a CPU without a 16-bit GEMM every 16-bit product runs in fp32 (ops/compute.h): its operands
// widened (whole when they fit in kGemmBlockElements, else a tile at a time) and its result summed
// in an fp32 tile of at most as many elements, then rounded. So a GEMM [M, K] x [K, N] holds
// 4 (min(MK, G) + min(KN, G) + min(MN, G)) bytes beside the step's tensors while it runs, and the
// step's largest sets the line: on the deep narrow shape of bench_memory.sh (vocabulary 8192,
// hidden 256) the head's, 25 MB, which the ledger missed (bf16 rows 6-7% under; fp32 rows within
// 5%). The candidates: the head's forward, input gradient and weight gradient, and each layer
// projection's (the projections' weight gradients only when they train).
Term gemm_workspace_line(const LedgerInputs& in, const Shape& s, Symbols& sym, Ledger& led) {
  if (!in.gemm_in_fp32) return Term();
  struct Gemm {
    std::string name;
    Term M, K, N;
  };
  const auto& cfg = in.config;
  const Term G = sym("G", ops::kGemmBlockElements);
  const Term q = sym("nh", cfg.num_attention_heads) * sym("d", cfg.head_dim), kv = sym("nkv", cfg.num_key_value_heads) * sym("d", cfg.head_dim);
  const ModuleTraining head = in.method->module("lm_head");
  const Term rows = in.chunked_loss && head.adapter_rank == 0 ? loss_rows(s, sym) : s.n;
  std::vector<Gemm> gemms = {{"the head's forward", rows, s.H, s.V}, {"the head's input gradient", rows, s.V, s.H}};
  if (head.weight_trains) gemms.push_back({"the head's weight gradient", s.V, rows, s.H});
  bool projections_train = false;
  for (const char* name : {"q_proj", "o_proj", "down_proj"}) projections_train = projections_train || in.method->module(name).weight_trains;
  const std::pair<Term, Term> projections[] = {{s.H, q}, {s.H, kv}, {q, s.H}, {s.H, s.I}, {s.I, s.H}};
  for (const auto& [from, to] : projections) {
    gemms.push_back({"a projection's forward", s.n, from, to});
    gemms.push_back({"a projection's input gradient", s.n, to, from});
    if (projections_train) gemms.push_back({"a projection's weight gradient", to, s.n, from});
  }
  Term largest;
  std::string which;
  for (const auto& g : gemms) {
    const Term t = Term::num(4) * (Term::min({g.M * g.K, G}) + Term::min({g.K * g.N, G}) + Term::min({g.M * g.N, G}));
    if (t.value() > largest.value()) {
      largest = t;
      which = g.name;
    }
  }
  led.lines.push_back({"fp32 GEMM copies", largest.value(), largest.text(),
                       "16-bit products in fp32 on this CPU (no 16-bit GEMM): the largest GEMM's widened operands and fp32 result (" + which +
                           "), at most G elements each"});
  return largest;
}

// What each symbol of a training ledger stands for, for the table `ctune estimate` prints.
SymbolMeanings training_symbol_meanings(bool seq_len_from_data) {
  return {{"B", "batch rows"}, {"T", seq_len_from_data ? "sequence: the data's longest row, which batches pad to" : "sequence"}, {"n", "tokens = B T"}, {"H", "hidden"}, {"I", "intermediate"}, {"L", "layers"},
          {"V", "vocabulary"}, {"nh", "query heads"}, {"nkv", "KV heads"}, {"d", "head dim"}, {"c", "bytes, matmul dtype"},
          {"r", "bytes, residual stream"}, {"F", "frozen weight bytes"}, {"N", "trainable parameters"}, {"P", "ranks sharing parameters"},
          {"S", "ranks sharing gradients and optimizer state"}, {"U", "bytes of a quantised base kept whole"},
          {"Wpart", "bytes of the largest part whole"}, {"Nmax", "largest trainable parameter"}, {"Nb", "elements of the largest gradient bucket"}, {"Npart", "trainable parameters of the largest part"}, {"rows", "loss rows per chunk"},
          {"runtime", "bytes before training"}, {"Kc", "compiled GEMM kernels cached"}, {"live", "live bytes at the peak"}, {"bq", "attention block query rows"},
          {"Lr", "layers that recompute"}, {"Nc", "weights kept in the compute dtype"}, {"Wref", "bytes of the reference copy"}, {"Uref", "bytes of its quantised projections"},
          {"Wteach", "bytes of the distillation teacher"}, {"Ht", "the teacher's hidden size"}, {"It", "the teacher's MLP width"},
          {"rowsd", "divergence rows per chunk"},
          {"Bg", "sequences generated together"}, {"Nnew", "new tokens at most"}, {"Tp", "the longest prompt"}, {"Bp", "distinct prompts generated for"},
          {"Bk", "training rows kept through the generation batch's steps"}, {"th", "threads, each with its own attention tiles or DeltaNet scratch"},
          {"Lb", "layers backward reaches (below the first that trains, none is kept)"}, {"Lg", "DeltaNet layers backward reaches"},
          {"La", "attention layers backward reaches"}, {"Ls", "sparse-MLP layers backward reaches"}, {"Ld", "dense-MLP layers backward reaches"},
          {"G", "elements of an fp32 GEMM operand or result tile at most"}};
}

}  // namespace

FrozenCopyBytes frozen_copy_bytes(const std::vector<model::ParameterShape>& parameters, at::ScalarType storage,
                                  const std::optional<quant::QuantSpec>& quantize) {
  FrozenCopyBytes bytes;
  for (const auto& p : parameters) {
    const bool quantised = quantize && p.is_weight() && p.sizes.size() == 2 && model::is_quantized_module(p.name.substr(0, p.name.rfind('.')));
    const std::int64_t n = quantised ? frozen_weight_bytes(quantize, storage, p.sizes[0], p.sizes[1]) : p.numel() * bytes_of(storage);
    bytes.total += n;
    if (quantised) bytes.quantised += n;
  }
  return bytes;
}

std::string format_mb(std::int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

std::string symbol_table(const std::vector<std::pair<std::string, std::int64_t>>& values, const SymbolMeanings& meanings) {
  std::string out;
  for (const auto& [name, value] : values) {
    std::string what;
    for (const auto& [n, m] : meanings)
      if (n == name) what = m;
    out += (out.empty() ? "" : ", ") + name + " = " + std::to_string(value) + (what.empty() ? "" : " (" + what + ")");
  }
  return out;
}

// The process's own memory beside the step's tensors: the runtime before training, what a step
// adds outside them, and oneDNN's kernel cache.
struct RuntimeTerms {
  Term runtime, step, kernels;
};
RuntimeTerms runtime_lines(const LedgerInputs& in, Symbols& sym, Ledger& led) {
  RuntimeTerms t;
  t.runtime = sym("runtime", in.runtime_bytes);
  led.lines.push_back({"runtime", in.runtime_bytes, t.runtime.text(), "this process before training: LibTorch, tokenizer, datasets"});
  t.step = in.step_runtime_bytes > 0 ? sym("Rs", in.step_runtime_bytes) : Term();
  if (in.step_runtime_bytes > 0)
    led.lines.push_back({"step runtime", in.step_runtime_bytes, t.step.text(),
                         "what a step adds outside its tensors: its kernels' code paged in at their first call, the runtimes' scratch outside "
                         "the tensor pool (15 MB + 1.5 MB a thread, measured: ops/threads.h)"});
  t.kernels = in.kernel_cache_bytes > 0 ? sym("Kc", in.kernel_cache_bytes) : Term();
  if (in.kernel_cache_bytes > 0)
    led.lines.push_back({"kernel cache", in.kernel_cache_bytes, t.kernels.text(),
                         "oneDNN's compiled bf16 GEMM kernels at its cache's capacity: routed row counts change every step (ops/compute.h)"});
  return t;
}

// A preference objective's frozen reference copy; zero without one.
Term reference_line(const LedgerInputs& in, const StateTerms& st, Symbols& sym, Ledger& led) {
  // The reference copy is sharded as the policy (its parts gathered while its forward computes, at
  // most one part whole: the policy's gathered term covers it, before the policy's activations
  // exist); its quantised projections stay whole.
  Term reference;
  if (in.reference.total > 0) {
    const Term whole = sym("Wref", in.reference.total), kept = in.reference.quantised > 0 ? sym("Uref", in.reference.quantised) : Term();
    reference = st.sharded_params ? Term::ceil_div(whole - kept, sym("P", in.parameter_shards)) + kept : whole;
    led.lines.push_back({"reference", reference.value(), reference.text(),
                         std::string("the preference objective's frozen reference: model.path as stored") +
                             (st.sharded_params ? ", sharded as the policy" + std::string(in.reference.quantised > 0 ? " (Uref: its quantised projections, whole)" : "") : "")});
  }
  return reference;
}

// A distilling objective's teacher: its weights, whole on every rank, and what its forward adds
// to the start of backward (train/objective/distill.h: it runs after the student's forward, whose
// activations are saved by then). Zero without one.
struct TeacherTerms {
  Term weights, forward;
};
TeacherTerms teacher_lines(const LedgerInputs& in, const Shape& s, Symbols& sym, Ledger& led) {
  TeacherTerms t;
  if (in.teacher.total == 0) return t;
  t.weights = sym("Wteach", in.teacher.total);
  led.lines.push_back({"teacher", t.weights.value(), t.weights.text(),
                       "the distillation teacher's frozen weights (objective.teacher.path as stored, projections quantised when asked), whole on every rank"});
  const Term Ht = sym("Ht", in.teacher_hidden), It = sym("It", in.teacher_intermediate);
  // The divergence's chunks: two logits of 4 bytes or c a row (train/step/chunked_loss.cpp).
  const Term rows = sym("rowsd", std::min<std::int64_t>(s.n.value(), default_chunk_rows(s.V.value(), 2 * std::max<std::int64_t>(4, s.c.value()))));
  // Its forward without gradients: the residual stream and its normed copy, and a layer's
  // largest transient, the MLP's three intermediates; then its final hidden states (at most
  // every position's) and one chunk's divergence: both logits, their log-softmax, softmax,
  // the mixture and the gradient, 8 fp32 [rows, V].
  t.forward = Term::max({Term::num(2) * s.r * s.n * Ht + Term::num(3) * s.c * s.n * It, s.c * s.n * Ht + Term::num(32) * rows * s.V});
  led.lines.push_back({"teacher forward", t.forward.value(), t.forward.text(),
                       "the teacher's forward beside the student's saved activations: the larger of its residual stream and MLP, and its "
                       "final hidden states with one chunk of the divergence (rowsd rows, 8 fp32 vocabulary rows each)"});
  return t;
}

// The peak's formula in words, as the ledger prints it.
std::string peak_formula_text(const LedgerInputs& in, bool sharded, bool scatters, const Term& copies, const Term& gemm_copies,
                              bool layer_workspace) {
  const std::string saved = copies.value() > 0 ? "activations + compute copies" : "activations";
  const std::string kernel_text = in.kernel_cache_bytes > 0 ? " + kernel cache" : "";
  const std::string step_text = in.step_runtime_bytes > 0 ? " + step runtime" : "";
  const std::string rollout_kept = std::string(in.reference.total > 0 ? " + reference" : "") + (in.teacher.total > 0 ? " + teacher" : "") +
                                   (in.kept_rows > 0 ? " + rollout batches" : "") + (gemm_copies.value() > 0 ? " + fp32 GEMM copies" : "");
  if (sharded) {
    return "max(weights + gradients + optimizer state (shards)" + rollout_kept + " + max(" + saved + " + loss buffers" +
           std::string(in.teacher.total > 0 ? " + teacher forward" : "") + " + gathered" +
           " + gathered grads, gathered + gathered grads + what the layers keep + one recomputed layer, optimizer-step temporaries" +
           std::string(in.generated_rows > 0 ? ", KV cache + generation prefill + the whole weights gathered" : "") + "), " +
           "weights + optimizer state (shards) + the whole weights" +
           (in.sharded_checkpoints ? " gathered for the result" : " and optimizer state gathered for a checkpoint") +
           ") + allocator + runtime" + step_text + kernel_text;
  }
  return "weights + optimizer state" + rollout_kept + " + max(" + saved + " + loss buffers" + std::string(in.teacher.total > 0 ? " + teacher forward" : "") +
         std::string(in.grad_accum > 1 ? " + gradients (accumulating)" : "") +
         ", gradients + what the layers keep + one recomputed layer + its output's gradient" +
         std::string(layer_workspace ? ", gradients + what the layers up to the last DeltaNet layer keep + its backward workspace + its output's gradient" : "") +
         ", gradients + tied gradients" +
         std::string(in.all_reduced_gradients ? ", gradients + their flat fp32 copy all-reduced" : "") +
         std::string(scatters ? ", gradients + the largest bucket reduce-scattered (flat, received, summed)" : "") +
         ", gradients + optimizer-step temporaries" +
         std::string(in.optimizer_shards > 1 && !in.sharded_checkpoints ? ", the whole optimizer state gathered for a checkpoint" : "") +
         std::string(in.generated_rows > 0 ? ", KV cache + generation prefill" : "") + ") + allocator + runtime" + step_text + kernel_text;
}

Ledger estimate_memory(const LedgerInputs& in) {
  Ledger led;
  Symbols sym;
  const Shape s = shape_symbols(in, sym);
  const StateTerms st = state_lines(in, sym, led);
  const ActivationTerms act = activation_lines(in, s, sym, led);
  const Term copies = compute_copy_line(in, s, sym, led);
  const Term loss = loss_line(in, s, sym, led);
  const Term tied = tied_gradient_line(in, st, s, sym, led);
  const Term gemm_copies = gemm_workspace_line(in, s, sym, led);
  const RolloutTerms rollout = rollout_lines(in, s, st.sharded_params ? st.whole_weights - st.unsharded : Term(), sym, led);
  const RuntimeTerms rt = runtime_lines(in, sym, led);
  const TeacherTerms teacher = teacher_lines(in, s, sym, led);
  const Term reference = reference_line(in, st, sym, led) + teacher.weights;

  // The peak: what is always there, plus the largest of the step's moments, plus what the
  // allocator holds on to. Under full_shard the sharded gradients stay through the step and
  // one part is whole (with its gradients in backward) at a time.
  const bool sharded = st.sharded_params;
  const Term base = st.weights + st.optimizer + (sharded ? st.grads : Term()) + reference + rollout.kept;
  const Term step_grads = sharded ? st.gathered + st.gathered_grads : st.grads;
  const Term backward_start = act.total + copies + loss + teacher.forward + (sharded ? st.gathered + st.gathered_grads : (in.grad_accum > 1 ? st.grads : Term()));
  // A layer that recomputes runs its forward again inside backward: its activations stand beside
  // what every layer not yet through backward keeps (under full recompute their inputs, the last
  // layer's first) and the gradient of the residual stream coming into it. The layers kept
  // their inputs until then: this moment, not the recomputed layer alone, sets the peak of a
  // recomputed run (hidden 512, 8 layers, LoRA on all projections, packed 4 x 256: measured
  // 360 MB against 316 MB predicted without it).
  const Term recomputing_layer = act.recomputed_transient.value() > 0
                                     ? step_grads + act.kept_by_layers + act.recomputed_transient + act.backward_workspace + s.r * s.n * s.H
                                     : Term();
  // A layer whose backward recomputes inside itself (the DeltaNet's chunks: ops/gated_delta.h)
  // holds that workspace beside what the layers up to it keep and the residual stream's
  // gradient; the loss buffers are gone by then. The last such layer sees the most.
  const Term layer_backward = act.backward_workspace.value() > 0 && act.recomputed_transient.value() == 0
                                  ? step_grads + act.kept_at_workspace + act.backward_workspace + s.r * s.n * s.H
                                  : Term();
  // The recomputed layer is gone by the time the embedding's gradient comes.
  const Term backward_end = step_grads + tied;
  // no_shard's reduction: the gradients and their flat fp32 copy, all-reduced, then copied back.
  const Term all_reduce = in.all_reduced_gradients ? st.grads + Term::num(4) * st.trainable : Term();
  // shard_grad_op's reduction (train/parallel/zero.h): bucket by bucket, the bucket's gradients
  // moved into one flat fp32 buffer, what the all-to-all receives (as large), and their sum over
  // ranks (this rank's chunk), beside the gradients not reduced yet. The largest bucket, at most
  // kBucketElements unless one parameter is larger, bounds it.
  const bool scatters = in.optimizer_shards > 1 && !sharded;
  const Term bucket = scatters ? sym("Nb", std::max(st.largest.value(), std::min<std::int64_t>(kBucketElements, st.trainable.value()))) : Term();
  const Term reduce_scatter =
      scatters ? st.grads + Term::num(4) * bucket + Term::num(4) * Term::ceil_div(bucket, st.shards) : Term();
  const Term optimizer_step = (sharded ? Term() : st.grads) +
                              (in.optimizer == "adamw" && !in.fused_optimizer
                                   ? Term::num(8) * Term::min({st.largest, Term::ceil_div(st.trainable, st.shards)})
                                   : Term());
  // Between steps, for a whole checkpoint, sharded optimizer state is gathered whole (rank 0
  // writes it); a sharded checkpoint gathers nothing. Under full_shard the whole weights are
  // gathered for the run's result (and for whole checkpoints) all the same (docs/distributed.md).
  const Term checkpoint_gather = (in.optimizer_shards > 1 && !in.sharded_checkpoints ? Term::num(st.opt_per_param) * st.trainable : Term()) +
                                 (sharded ? st.whole_weights - st.unsharded : Term());
  // Between steps the gradients are gone (the optimizer drops them after its update, sharded or
  // not), so a gather for the result or a checkpoint stands on weights and optimizer state only.
  const Term between_steps = st.weights + st.optimizer + reference + checkpoint_gather;
  // A GEMM's fp32 copies stand beside whichever moment is the largest (each moment has GEMMs).
  const Term during_step = base + gemm_copies +
                           Term::max({backward_start, recomputing_layer, layer_backward, backward_end, all_reduce, reduce_scatter, optimizer_step,
                                      rollout.generation});
  const Term live = Term::max({during_step, between_steps});
  const std::pair<const char*, Term> moments[] = {{"the start of backward (saved activations and loss buffers)", backward_start},
                                                   {"a recomputed layer's backward (what the layers keep, its activations)", recomputing_layer},
                                                   {"the last DeltaNet layer's backward (what the layers up to it keep, its recomputed chunks)", layer_backward},
                                                   {"the end of backward (gradients)", backward_end},
                                                   {"the gradients' all-reduce", all_reduce},
                                                   {"the gradients' reduce-scatter", reduce_scatter},
                                                   {"the optimizer step", optimizer_step},
                                                   {"the rollout's generation (KV cache and prefill)", rollout.generation}};
  for (const auto& [name, term] : moments) {
    if (term.value() > led.peak_moment_bytes || led.peak_moment.empty()) {
      led.peak_moment = name;
      led.peak_moment_bytes = term.value();
    }
  }
  if (between_steps.value() > during_step.value()) {
    led.peak_between_steps = true;
    led.peak_moment = sharded ? (in.sharded_checkpoints ? "the whole model gathered for the run's result"
                                                        : "the whole model and optimizer state gathered for a checkpoint")
                              : "the whole optimizer state gathered for a checkpoint";
    led.peak_moment_bytes = checkpoint_gather.value();
  }
  // The tensor pool (ops/tensor_pool.h) holds at most 1/kPoolSlackDivisor over the peak of its
  // live tensors, by its policy: it returns free ranges before it would hold more. The bound is
  // taken over all live bytes (the few unpooled ones, below 256 KiB each, included).
  const Term reserve = in.exact_allocator ? Term() : Term::ceil_div(sym("live", live.value()), Term::num(ops::kPoolSlackDivisor));
  led.lines.push_back({"allocator", reserve.value(), reserve.text(),
                       in.exact_allocator ? "memory.allocator: exact returns freed blocks at once"
                                          : "the tensor pool's bound: it returns free ranges before it holds more than its live peak plus 1/" +
                                                std::to_string(ops::kPoolSlackDivisor) + " (memory.allocator: exact makes it 0)"});
  const Term peak = live + reserve + rt.runtime + rt.step + rt.kernels;
  led.peak_bytes = peak.value();
  for (const auto& l : led.lines)
    if (l.pool == "host") led.host_bytes += l.bytes;
  led.state_bytes = (st.weights + st.gathered + st.grads + st.gathered_grads + st.optimizer).value();
  led.trainable_parameters = st.trainable.value();
  led.optimizer_bytes_per_parameter = st.opt_per_param;
  led.peak_formula = peak_formula_text(in, sharded, scatters, copies, gemm_copies, layer_backward.value() > 0);
  led.symbol_values = sym.values;
  led.symbols = symbol_table(led.symbol_values, training_symbol_meanings(in.seq_len_from_data));
  return led;
}

Json Ledger::to_json() const {
  Json lines_json = Json::array();
  for (const auto& l : lines)
    lines_json.push_back({{"name", l.name}, {"bytes", l.bytes}, {"formula", l.formula}, {"note", l.note}, {"pool", l.pool}});
  Json values = Json::object();
  for (const auto& [name, value] : symbol_values) values[name] = value;
  return {{"lines", lines_json}, {"peak_bytes", peak_bytes}, {"peak_formula", peak_formula}, {"host_bytes", host_bytes}, {"state_bytes", state_bytes},
          {"activations_per_layer_bytes", activations_per_layer}, {"symbols", symbols}, {"symbol_values", values},
          {"peak_moment", peak_moment}, {"peak_moment_bytes", peak_moment_bytes}, {"peak_between_steps", peak_between_steps}};
}

std::string Ledger::to_text() const {
  std::ostringstream s;
  char buf[64];
  for (const auto& l : lines) {
    std::snprintf(buf, sizeof(buf), "%-16s %12s  ", l.name.c_str(), format_mb(l.bytes).c_str());
    s << buf << (l.pool == "host" ? "[host] " : "") << l.formula << (l.note.empty() ? "" : "  (" + l.note + ")") << "\n";
  }
  std::snprintf(buf, sizeof(buf), "%-16s %12s  ", "peak", format_mb(peak_bytes).c_str());
  s << buf << peak_formula << "\n";
  if (host_bytes > 0) {
    std::snprintf(buf, sizeof(buf), "%-16s %12s  ", "of which host", format_mb(host_bytes).c_str());
    s << buf << "distributed.cpu_offload: shards, their gradients and optimizer state (one pool with the device on a CPU build)\n";
  }
  s << "symbols          " << symbols << "\n";
  return s.str();
}

}  // namespace ctune::train
