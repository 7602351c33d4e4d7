// The generation view of the memory ledger (`ctune estimate --generate`): what `ctune generate`
// holds for a batch of prompts, docs/formats.md "Memory of generation".
#include "model/decoder.h"
#include "ops/attention.h"
#include "ops/attention_tiled.h"
#include "train/forecast/memory_ledger.h"

namespace ctune::train {

Term prompt_pass_bytes(const PromptPass& p) {
  // A layer's hidden states (input, norm, output) with either its attention (q, k, v and the
  // kernel's scores) or its MLP (gate, up, their product), the mask, and the last position's
  // logits. The scores: tiled, each thread's tile of fp32 scores, probabilities in c and, when
  // c is narrower than fp32, the fp32 output rows it rounds from; else one block of fp32 scores
  // and probabilities over every prompt and head.
  const Term four = Term::num(4);
  const Term rows = p.c.value() < 4 ? four * p.d : Term();
  const Term scores = p.tiled ? p.threads * Term::min({p.P, Term::num(ops::kTileQueries)}) * (p.P * (four + p.c) + rows)
                              : Term::num(2) * p.prompts * p.nh * Term::min({p.P, Term::num(ops::kBlockQueries)}) * p.P * four;
  const Term attention = p.prompts * p.P * (p.nh + Term::num(2) * p.nkv) * p.d * p.c + scores;
  const Term mlp = Term::num(3) * p.prompts * p.P * p.I * p.c;
  return Term::num(3) * p.prompts * p.P * p.H * p.c + Term::max({attention, mlp}) + p.prompts * p.P * p.P + p.logit_rows * p.V * four;
}

std::string prompt_pass_note(const PromptPass& p) {
  return std::string("hidden states, the larger of attention (q, k, v, ") + (p.tiled ? "each thread's tile of scores" : "a block of fp32 scores") +
         ") and the MLP, the mask";
}

Ledger estimate_generation_memory(const GenerationLedgerInputs& in) {
  const auto& c = in.config;
  // generate computes in the dtype the weights are stored in, so activations and the cache are
  // in it too.
  const bool tiled = ops::tiled_attention_applies(at::Device(at::kCPU), in.storage_dtype, in.batch * c.num_key_value_heads, in.threads);
  Ledger led;
  // Each symbol's value, so that every formula evaluates as a training ledger's does.
  const auto sym = [&](const std::string& name, std::int64_t value) {
    led.symbol_values.emplace_back(name, value);
    return Term::sym(name, value);
  };
  const Term B = sym("B", in.batch), P = sym("P", in.prompt_tokens), N = sym("N", in.new_tokens), H = sym("H", c.hidden_size),
             I = sym("I", c.mlp_width()), L = sym("L", c.num_hidden_layers), V = sym("V", c.vocab_size),
             nh = sym("nh", c.num_attention_heads), nkv = sym("nkv", c.num_key_value_heads), d = sym("d", c.head_dim),
             s = sym("s", static_cast<std::int64_t>(c10::elementSize(in.storage_dtype))),
             th = tiled ? sym("th", in.threads) : Term(), count = sym("parameters", in.parameters);
  led.symbols = symbol_table(led.symbol_values, {{"B", "sequences"}, {"P", "prompt tokens"}, {"N", "new tokens"}, {"H", "hidden"},
                                                 {"I", "intermediate"}, {"L", "layers"}, {"V", "vocabulary"}, {"nh", "query heads"},
                                                 {"nkv", "KV heads"}, {"d", "head dim"}, {"s", "bytes, stored and computed dtype"},
                                                 {"th", "threads"}, {"parameters", "weights"}});
  const Term weights = count * s;
  led.lines.push_back({"weights", weights.value(), weights.text(), "an adapter applied at run time adds its own, small"});
  const Term kv = model::KVCache::model_bytes(c, L, nkv, d, P + N, B, s);
  led.lines.push_back({"kv_cache", kv.value(), kv.text(), "K and V, preallocated, KV heads only"});
  const PromptPass pass{.prompts = B, .logit_rows = B, .P = P, .H = H, .I = I, .V = V, .nh = nh, .nkv = nkv, .d = d, .c = s, .threads = th, .tiled = tiled};
  const Term prefill = prompt_pass_bytes(pass);
  led.lines.push_back({"prefill", prefill.value(), prefill.text(), "the prompts' forward pass: " + prompt_pass_note(pass) + ", the last logits"});
  led.peak_bytes = weights.value() + kv.value() + prefill.value();
  led.peak_formula = "weights + kv_cache + prefill (a decode step holds one position; the process itself, libraries and tokenizer, is not counted)";
  led.state_bytes = weights.value();
  return led;
}

}  // namespace ctune::train
