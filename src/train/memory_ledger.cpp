#include "train/memory_ledger.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/module_names.h"
#include "ops/quant_bytes.h"

namespace ctune::train {

namespace {

std::int64_t bytes_of(at::ScalarType t) { return static_cast<std::int64_t>(c10::elementSize(t)); }

std::string mb(std::int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

// Bytes of one frozen projection weight as stored.
std::int64_t frozen_weight_bytes(const LedgerInputs& in, std::int64_t rows, std::int64_t cols) {
  if (!in.quantize_base) return rows * cols * bytes_of(in.storage_dtype);
  if (in.quantize_base->kind == quant::QuantSpec::Int8) return ops::int8_weight_bytes(rows, cols);
  return ops::nf4_weight_bytes(rows * cols, in.quantize_base->blocksize, in.quantize_base->double_quant);
}

}  // namespace

Ledger estimate_memory(const LedgerInputs& in) {
  const auto& c = in.config;
  const std::int64_t B = in.batch_size, T = in.seq_len, n = B * T, H = c.hidden_size, I = c.intermediate_size,
                     L = c.num_hidden_layers, V = c.vocab_size, nh = c.num_attention_heads, d = c.head_dim;
  const Method& method = *in.method;
  // Residual-stream bytes (r): the weights' storage dtype (full fine-tuning keeps fp32 masters,
  // a LoRA base is stored in the compute dtype). Matmul bytes (c): the compute dtype, or in fp32
  // precision whatever the weights are stored in. When r != c every matmul input is a fresh cast.
  const std::int64_t rb = bytes_of(in.storage_dtype);
  const std::int64_t cb = in.compute_dtype != at::kFloat ? bytes_of(in.compute_dtype) : rb;
  const bool dropout = std::any_of(linear_module_names().begin(), linear_module_names().end(),
                                   [&](const std::string& m) { return method.module(m).adapter_dropout > 0; });

  Ledger led;
  {
    std::ostringstream s;
    s << "n = batch " << B << " x seq " << T << " = " << n << " tokens, H " << H << ", I " << I << ", L " << L << ", V " << V
      << ", heads " << nh << "/" << c.num_key_value_heads << " x d " << d << ", c = " << cb << " B (matmul dtype), r = " << rb
      << " B (residual stream)";
    led.symbols = s.str();
  }

  // Weights, gradients, optimizer state. A weight that trains is an fp32 master with a gradient
  // and optimizer state; a frozen one is stored as it is; adapters train in fp32 (and are too
  // small for the optimizer step's temporaries to matter).
  // Under full_shard the parameters are counted per part (embedding, each block, final norm
  // and head) too: one part is whole at a time while it computes.
  std::int64_t frozen = 0, trainable = 0, largest_trainable = 0, unsharded = 0;
  struct Part {
    std::int64_t frozen = 0, trainable = 0;
  };
  std::vector<Part> parts(1);
  const std::int64_t sb = rb;
  auto add = [&](const std::string& module, std::int64_t count, std::int64_t frozen_bytes) {
    if (method.module(module).weight_trains) {
      trainable += count;
      parts.back().trainable += count;
      largest_trainable = std::max(largest_trainable, count);
    } else {
      frozen += frozen_bytes;
      parts.back().frozen += frozen_bytes;
      if (in.quantize_base && frozen_bytes != count * sb) unsharded += frozen_bytes;  // quantised: kept whole
    }
  };
  auto add_adapter = [&](const std::string& module, std::int64_t in_dim, std::int64_t out_dim) {
    trainable += method.module(module).adapter_rank * (in_dim + out_dim);
    parts.back().trainable += method.module(module).adapter_rank * (in_dim + out_dim);
  };
  add("embed_tokens", V * H, V * H * sb);
  for (std::int64_t l = 0; l < L; ++l) {
    parts.emplace_back();
    add("input_layernorm", H, H * sb);
    add("post_attention_layernorm", H, H * sb);
    for (const auto& name : projection_names()) {
      const auto p = c.projection(name);
      add(name, p.in * p.out, frozen_weight_bytes(in, p.out, p.in));
      if (p.bias) add(name, p.out, p.out * sb);
      add_adapter(name, p.in, p.out);
    }
  }
  parts.emplace_back();
  add("norm", H, H * sb);
  if (!c.tie_word_embeddings) {
    add("lm_head", V * H, V * H * sb);  // never quantised
    add_adapter("lm_head", H, V);
  }
  const std::int64_t P = in.parameter_shards, S = in.optimizer_shards;
  auto per_rank = [](std::int64_t total, std::int64_t ranks) { return (total + ranks - 1) / ranks; };
  const std::int64_t whole_weights = frozen + 4 * trainable;
  // A part whole: its frozen bytes (a quantised base's stay whole anyway) and fp32 trainables;
  // the head part of a tied model also uses the embedding matrix.
  std::int64_t largest_part = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::int64_t bytes = parts[i].frozen + 4 * parts[i].trainable;
    if (i + 1 == parts.size() && c.tie_word_embeddings) bytes += parts[0].frozen + 4 * parts[0].trainable;
    largest_part = std::max(largest_part, bytes);
  }
  const bool sharded_params = P > 1;
  const std::int64_t weights = sharded_params ? per_rank(whole_weights - unsharded, P) + unsharded : whole_weights;
  const std::int64_t gathered = sharded_params ? (in.prefetch ? 2 : 1) * largest_part : 0;
  const std::int64_t grads = S > 1 && sharded_params ? per_rank(4 * trainable, S) : 4 * trainable;
  // Each parameter's gradient is reduce-scattered as soon as it is whole (train/full_shard.h).
  const std::int64_t gathered_grads = sharded_params ? 4 * largest_trainable : 0;
  const std::int64_t opt_per_param = in.optimizer == "adamw" ? 8 : (in.momentum > 0 ? 4 : 0);
  // Sharded (train/zero.h): each rank keeps the state of its 1/N of the trainable elements.
  const std::int64_t optimizer = opt_per_param * per_rank(trainable, S);
  const std::string pool = in.cpu_offload ? "host" : "device";
  const std::string frozen_text =
      frozen == 0 ? std::string()
                  : mb(frozen) + " frozen" +
                        (in.quantize_base ? std::string(in.quantize_base->kind == quant::QuantSpec::Int8
                                                            ? " (projections int8: out*in + 4*out)"
                                                            : " (projections nf4: n/2 + block scales)")
                                          : " (" + std::to_string(sb) + " B/param)") +
                        " + ";
  const std::string shard_text = " / " + std::to_string(P) + " ranks";
  led.lines.push_back({"weights", weights,
                       (sharded_params ? "(" : "") + frozen_text + "4 x " + std::to_string(trainable) + " trainable fp32 parameters" +
                           (sharded_params ? ")" + shard_text + (unsharded > 0 ? " (the quantised base stays whole)" : "") : ""),
                       pool});
  if (sharded_params) {
    led.lines.push_back({"gathered", gathered, std::string(in.prefetch ? "two of the largest part (this one and the next, prefetched)" : "the largest part") +
                                                    " (embedding, block, or norm and head) whole while it computes"});
  }
  led.lines.push_back({"gradients", grads,
                       "4 x " + std::to_string(trainable) + " trainable (fp32)" + (sharded_params ? " / " + std::to_string(S) + " ranks" : ""),
                       sharded_params ? pool : "device"});
  if (sharded_params) {
    led.lines.push_back({"gathered grads", gathered_grads, "the largest trainable parameter's gradient whole until reduce-scattered"});
  }
  led.lines.push_back({"optimizer state", optimizer,
                       std::to_string(opt_per_param) + " x " + std::to_string(trainable) + " trainable" +
                           (S > 1 ? " / " + std::to_string(S) + " ranks" : std::string()) + " (" + in.optimizer + ")",
                       pool});

  // Activations kept for backward by one decoder layer without recompute.
  auto input_saved = [&](const char* name, std::int64_t in_dim) {
    // The base keeps its input when its weight trains; an adapter keeps its (dropped-out) input,
    // which without dropout is the very tensor the base sees; and its rank-r intermediate.
    const ModuleTraining m = method.module(name);
    std::int64_t b = m.weight_trains ? cb * n * in_dim : 0;
    if (m.adapter_rank > 0) {
      b += (m.adapter_dropout > 0 ? 2 * cb * n * in_dim : (m.weight_trains ? 0 : cb * n * in_dim)) + cb * n * m.adapter_rank;
    }
    return b;
  };
  auto shared_input = [&](std::initializer_list<const char*> names, std::int64_t in_dim) {
    // Without dropout, projections that read the same norm output share one saved copy when the
    // norm output already has the matmul dtype; with r != c (fp32 masters, low-precision
    // matmuls) each projection casts (and keeps) its own copy, as autocast does.
    std::int64_t sum = 0, first = 0;
    for (const char* name : names) {
      const auto b = input_saved(name, in_dim);
      sum += b;
      first = std::max(first, b);
    }
    const bool shares = !dropout && rb == cb;
    return shares ? first : sum;
  };
  // RMSNorm keeps two fp32 [n, H] tensors: its input as fp32 (for the square) and the normalised
  // value (for the product with 1/rms); the weight's gradient reads the latter, no extra copy.
  const std::int64_t norm = 8 * n * H;
  const std::int64_t qkv = shared_input({"q_proj", "k_proj", "v_proj"}, H);
  // Materialized attention keeps the fp32 probabilities (and their cast), a negated mask and
  // q with K and V repeated to every query head; blocked attention keeps q, the KV heads' K and
  // V, and the model's one mask (shared by all layers, counted once below), and needs one
  // block's scores, probabilities and their gradients at a time (ops/attention.h).
  const bool blocked = in.recompute.blocked_attention;
  const std::int64_t scores = blocked ? 0 : B * nh * T * T * (4 + (cb != 4 ? cb : 0)) + B * T * T;
  // A block spans every batch row: fp32 P, dP and one product, and P and dS in the matmul dtype.
  const std::int64_t block_workspace = blocked ? B * nh * std::min<std::int64_t>(ops::kBlockQueries, T) * T * (12 + 2 * cb) : 0;
  const std::int64_t core = n * (blocked ? nh + 2 * c.num_key_value_heads : 3 * nh) * d * cb;
  const std::int64_t o_in = input_saved("o_proj", nh * d);
  const std::int64_t mlp_in = shared_input({"gate_proj", "up_proj"}, H);
  const std::int64_t swiglu = 3 * n * I * cb;
  const std::int64_t down_in = input_saved("down_proj", I);
  const std::int64_t layer = 2 * norm + qkv + scores + core + o_in + mlp_in + swiglu + down_in;
  led.activations_per_layer = layer;

  std::int64_t kept = 0, recomputed_transient = 0, recomputing = 0;
  for (std::int64_t l = 0; l < L; ++l) {
    if (in.recompute.recompute_block(l)) {
      kept += rb * n * H;  // only the block input
      recomputed_transient = layer;
      ++recomputing;
    } else if (in.recompute.attention_kernel() == ops::AttentionKernel::recomputed) {
      kept += layer - scores;
    } else {
      kept += layer;
    }
  }
  const std::int64_t top = 8 * n * H + rb * n * H + (blocked ? B * T * T : 0);  // final norm, loss input, mask
  const std::int64_t activations = kept + top + block_workspace;
  {
    std::ostringstream s;
    s << "per layer " << mb(layer) << " = 2 norms (8nH) + q/k/v inputs " << mb(qkv)
      << (blocked ? std::string(" + q,k,v n (nh + 2 nkv) d c (blocked attention keeps no scores)")
                  : std::string(" + scores B nh T^2 (4") + (cb != 4 ? " + c" : "") + ") + mask B T^2 + q,k,v 3 n nh d c")
      << " + o input " << mb(o_in)
      << " + MLP inputs " << mb(mlp_in) << " + SwiGLU 3 n I c + down input " << mb(down_in) << "; ";
    if (recomputing > 0) {
      s << recomputing << " of " << L << " layers keep only their input (r nH) and recompute";
    } else if (in.recompute.attention_kernel() == ops::AttentionKernel::recomputed) {
      s << "selective: the attention scores are recomputed";
    } else {
      s << "x " << L << " layers";
    }
    s << "; + final norm, loss input" << (blocked ? " and the attention mask B T^2 " : " ") << mb(top);
    if (blocked) s << " + one attention block's workspace " << mb(block_workspace) << " (B nh x 128 x T x (12 + 2c))";
    led.lines.push_back({"activations", activations, s.str()});
  }

  // Logits and loss buffers: the largest moment is the loss's backward.
  std::int64_t loss_bytes;
  std::string loss_formula;
  const ModuleTraining head = method.module("lm_head");
  const bool head_trains = head.weight_trains || head.adapter_rank > 0;
  if (in.chunked_loss && head.adapter_rank == 0) {
    const std::int64_t rows = std::min<std::int64_t>(n, std::max<std::int64_t>(16, (16ll << 20) / (4 * V)));
    loss_bytes = rows * V * (2 * cb + 8) + (head_trains ? 8 * V * H : 0);
    loss_formula = "chunked: " + std::to_string(rows) + " rows x V x (2c + 8) per chunk" +
                   std::string(head_trains ? " + head gradient and its accumulator 8 V H" : "");
  } else {
    loss_bytes = n * V * (4 + 8 + cb) + (head_trains ? 4 * V * H : 0);
    loss_formula = "full logits: n V (4 saved log-softmax + 8 gradient + c head output)" +
                   std::string(head_trains ? " + head gradient 4 V H" : "");
  }
  led.lines.push_back({"logits and loss", loss_bytes, loss_formula});
  const std::int64_t kv = 2 * L * c.num_key_value_heads * d * T * B * cb;
  led.lines.push_back({"KV cache", 0, "none in training (generation at this batch and length: " + mb(kv) + ")"});
  led.lines.push_back({"runtime", in.runtime_bytes, "this process before training: LibTorch, tokenizer, datasets"});

  // The peak: what is always there, plus the largest of the step's moments, plus what the
  // allocator holds on to.
  // Under full_shard the sharded gradients stay through the step and one part is whole (with
  // its gradients in backward) at a time.
  const std::int64_t base = weights + optimizer + (sharded_params ? grads : 0);
  const std::int64_t step_grads = sharded_params ? gathered + gathered_grads : grads;
  const std::int64_t backward_start =
      activations + loss_bytes + (sharded_params ? gathered + gathered_grads : (in.grad_accum > 1 ? grads : 0));
  const std::int64_t backward_end = step_grads + recomputed_transient;
  const std::int64_t optimizer_step = (sharded_params ? 0 : grads) + (in.optimizer == "adamw" ? 8 * std::min(largest_trainable, per_rank(trainable, S)) : 0);
  // Between steps, for a whole checkpoint, sharded optimizer state is gathered whole (rank 0
  // writes it); a sharded checkpoint gathers nothing. Under full_shard the whole weights are
  // gathered for the run's result (and for whole checkpoints) all the same (docs/distributed.md).
  const std::int64_t checkpoint_gather =
      (S > 1 && !in.sharded_checkpoints ? opt_per_param * trainable : 0) + (sharded_params ? whole_weights - unsharded : 0);
  const std::int64_t live = base + std::max({backward_start, backward_end, optimizer_step, checkpoint_gather});
  // glibc's heap keeps freed activation and gradient blocks for reuse and fragments around them.
  // The reserve is calibrated, not derived: 0.30 x the live bytes, the middle of what
  // scripts/bench_memory.sh measured over its grid (0.14-0.47; see README, Memory).
  const std::int64_t reserve = in.exact_allocator ? 0 : static_cast<std::int64_t>(0.30 * static_cast<double>(live));
  led.lines.push_back({"allocator", reserve,
                       in.exact_allocator ? "memory.allocator: exact returns freed blocks at once"
                                          : "glibc heap reserve, calibrated at 0.30 x the live bytes (memory.allocator: exact makes it 0)"});
  led.peak_bytes = live + reserve + in.runtime_bytes;
  for (const auto& l : led.lines)
    if (l.pool == "host") led.host_bytes += l.bytes;
  led.state_bytes = weights + gathered + grads + gathered_grads + optimizer;
  if (sharded_params) {
    led.peak_formula = std::string("weights + gradients + optimizer state (shards) + max(activations + loss buffers + gathered") +
                       " + gathered grads, gathered + gathered grads + one recomputed layer, optimizer-step temporaries, the whole weights" +
                       (in.sharded_checkpoints ? " gathered for the result" : " and optimizer state gathered for a checkpoint") +
                       ") + allocator + runtime";
  } else {
    led.peak_formula = "weights + optimizer state + max(activations + loss buffers" +
                       std::string(in.grad_accum > 1 ? " + gradients (accumulating)" : "") +
                       ", gradients + one recomputed layer, gradients + optimizer-step temporaries" +
                       std::string(in.optimizer_shards > 1 && !in.sharded_checkpoints ? ", the whole optimizer state gathered for a checkpoint" : "") +
                       ") + allocator + runtime";
  }
  return led;
}

Json Ledger::to_json() const {
  Json lines_json = Json::array();
  for (const auto& l : lines) lines_json.push_back({{"name", l.name}, {"bytes", l.bytes}, {"formula", l.formula}, {"pool", l.pool}});
  return {{"lines", lines_json}, {"peak_bytes", peak_bytes}, {"peak_formula", peak_formula}, {"host_bytes", host_bytes}, {"state_bytes", state_bytes},
          {"activations_per_layer_bytes", activations_per_layer}, {"symbols", symbols}};
}

std::string Ledger::to_text() const {
  std::ostringstream s;
  char buf[64];
  for (const auto& l : lines) {
    std::snprintf(buf, sizeof(buf), "%-16s %12s  ", l.name.c_str(), mb(l.bytes).c_str());
    s << buf << (l.pool == "host" ? "[host] " : "") << l.formula << "\n";
  }
  std::snprintf(buf, sizeof(buf), "%-16s %12s  ", "peak", mb(peak_bytes).c_str());
  s << buf << peak_formula << "\n";
  if (host_bytes > 0) {
    std::snprintf(buf, sizeof(buf), "%-16s %12s  ", "of which host", mb(host_bytes).c_str());
    s << buf << "distributed.cpu_offload: shards, their gradients and optimizer state (one pool with the device on a CPU build)\n";
  }
  s << "symbols          " << symbols << "\n";
  return s.str();
}

void use_fast_allocator() {
  mallopt(M_MMAP_MAX, 0);                    // no block gets a mapping of its own
  mallopt(M_TRIM_THRESHOLD, -1);             // never trimmed (mallopt(3)): freed memory stays for the next step
  mallopt(M_TOP_PAD, 64 * 1024 * 1024);      // grow the heap in large steps (fewer brk calls)
}

void use_exact_allocator() {
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);  // a fixed threshold also stops glibc from raising it
  mallopt(M_TRIM_THRESHOLD, 256 * 1024);
}

}  // namespace ctune::train
