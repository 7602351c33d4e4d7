// The generation view of the memory ledger (`ctune estimate --generate`): what `ctune generate`
// holds for a batch of prompts, docs/formats.md "Memory of generation".
#include <sstream>

#include "ops/attention.h"
#include "ops/attention_tiled.h"
#include "train/observe/memory_ledger.h"

namespace ctune::train {

Ledger estimate_generation_memory(const GenerationLedgerInputs& in) {
  const auto& c = in.config;
  const std::int64_t B = in.batch, P = in.prompt_tokens, N = in.new_tokens, H = c.hidden_size, I = c.intermediate_size,
                     L = c.num_hidden_layers, V = c.vocab_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads,
                     d = c.head_dim;
  // generate computes in the dtype the weights are stored in, so activations and the cache are
  // in it too.
  const auto s = static_cast<std::int64_t>(c10::elementSize(in.storage_dtype));
  Ledger led;
  {
    std::ostringstream sym;
    sym << "B " << B << " sequences, P " << P << " prompt tokens, N " << N << " new tokens, H " << H << ", I " << I << ", L " << L
        << ", V " << V << ", heads " << nh << "/" << nkv << " x d " << d << ", s = " << s << " B (stored and computed dtype)";
    led.symbols = sym.str();
  }
  const std::int64_t weights = in.parameters * s;
  led.lines.push_back({"weights", weights, "parameters x s (an adapter applied at run time adds its own, small)", ""});
  const std::int64_t kv = 2 * L * B * (P + N) * nkv * d * s;
  led.lines.push_back({"kv_cache", kv, "2 (K, V) x L x B x (P + N) x kv heads x d x s: preallocated, KV heads only", ""});
  // The prompt's forward pass is the largest transient: a layer's hidden states (input, norm,
  // output) with either its attention (q, k, v and the kernel's scores) or its MLP (gate, up,
  // their product), the mask, and the last position's logits. The scores: tiled
  // (ops/attention_tiled.h, where it runs), each thread's block of fp32 scores, probabilities in
  // s and fp32 output rows; else one block of fp32 scores and probabilities over every prompt
  // and head.
  const bool tiled = ops::tiled_attention_applies(at::Device(at::kCPU), in.storage_dtype, B * nkv, in.threads);
  const std::int64_t block = std::min<std::int64_t>(P, tiled ? ops::kTileQueries : ops::kBlockQueries);
  const std::int64_t scores = tiled ? in.threads * block * (P * (4 + s) + 4 * d) : 2 * B * nh * block * P * 4;
  const std::string scores_text = tiled ? std::to_string(in.threads) + " threads x " + std::to_string(block) + " (P (4 + s) + 4 d) (each thread's tile)"
                                        : "2 B heads " + std::to_string(block) + " P 4 (a block's scores)";
  const std::int64_t attention = B * P * (nh + 2 * nkv) * d * s + scores;
  const std::int64_t mlp = 3 * B * P * I * s;
  const std::int64_t prefill = 3 * B * P * H * s + std::max(attention, mlp) + B * P * P + B * V * 4;
  led.lines.push_back({"prefill", prefill,
                       "3 B P H s (hidden states) + max(attention B P (heads + 2 kv heads) d s + " + scores_text +
                           ", MLP 3 B P I s) + B P P (mask) + B V 4 (last logits)", ""});
  led.peak_bytes = weights + kv + prefill;
  led.peak_formula = "weights + kv_cache + prefill (a decode step holds one position; the process itself, libraries and tokenizer, is not counted)";
  led.state_bytes = weights;
  return led;
}

}  // namespace ctune::train
