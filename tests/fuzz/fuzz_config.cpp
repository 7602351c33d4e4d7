// libFuzzer target: any bytes as a model directory's config.json, read as every command reads
// one (model/config.h: the shared dimensions, then the family's own keys). Checks: a ctune
// error is the only way out (never a crash, a sanitizer report or a raw std:: exception); a
// config that is read holds what the model code relies on without checking (positive
// dimensions, heads a multiple of the key/value heads, an even head_dim, an even rotated part,
// per-layer tables of the layer count, windows not negative, the experts chosen among those
// there are); and writing it (config_to_json, as `init`, `merge` and checkpoints do) and
// reading that back gives the same model.
// Run with scripts/fuzz.sh config (docs/testing.md#fuzzing).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "fuzz_check.h"
#include "model/config.h"

namespace {

using namespace ctune;

void check_invariants(const model::ModelConfig& c) {
  CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.num_hidden_layers > 0);
  CHECK(c.num_attention_heads > 0 && c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads == 0);
  CHECK(c.head_dim > 0 && c.head_dim % 2 == 0);
  CHECK(c.max_position_embeddings > 0 && c.rms_norm_eps > 0);
  const auto rotary = c.rope.rotary_dim(c.head_dim);
  CHECK(rotary >= 2 && rotary % 2 == 0 && rotary <= c.head_dim);
  CHECK(c.rope.theta > 0);
  const auto layers = static_cast<std::size_t>(c.num_hidden_layers);
  const auto& a = c.arch;
  for (const auto* table : {&a.rope_layers, &a.local_rope_layers, &a.moe.sparse_layers})
    CHECK(table->empty() || table->size() == layers);
  CHECK(a.layer_windows.empty() || a.layer_windows.size() == layers);
  for (auto w : a.layer_windows) CHECK(w >= 0);
  if (a.moe.experts > 0) {
    CHECK(a.moe.top_k > 0 && a.moe.top_k <= a.moe.experts);
    CHECK(a.moe.intermediate > 0);
  }
  CHECK(a.attn_softcap >= 0 && a.final_softcap >= 0);
  if (a.local_rope) CHECK(a.local_rope->theta > 0);
  if (a.query_pre_attn_scalar) CHECK(*a.query_pre_attn_scalar > 0);
  if (c.rope.type == "longrope") {
    CHECK(c.rope.short_factor.size() == static_cast<std::size_t>(rotary / 2));
    CHECK(c.rope.long_factor.size() == static_cast<std::size_t>(rotary / 2));
  }
  for (const char* name : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) {
    const auto p = c.projection(name);
    CHECK(p.in > 0 && p.out > 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  model::ModelConfig c;
  try {
    c = model::parse_model_config(parse_json(std::string(input), "config.json"), "config.json");
  } catch (const Error&) {
    return 0;
  }
  check_invariants(c);
  // What ctune writes, it reads back as the same model.
  model::ModelConfig back;
  try {
    back = model::parse_model_config(model::config_to_json(c, "bfloat16"), "written config.json");
  } catch (const Error& e) {
    std::fprintf(stderr, "fuzz_config: a written config is refused: %s\n", e.what());
    std::abort();
  }
  CHECK(back.model_type == c.model_type && back.vocab_size == c.vocab_size && back.hidden_size == c.hidden_size);
  CHECK(back.intermediate_size == c.intermediate_size && back.num_hidden_layers == c.num_hidden_layers);
  CHECK(back.num_attention_heads == c.num_attention_heads && back.num_key_value_heads == c.num_key_value_heads);
  CHECK(back.head_dim == c.head_dim && back.tie_word_embeddings == c.tie_word_embeddings);
  CHECK(back.arch.layer_windows == c.arch.layer_windows && back.arch.rope_layers == c.arch.rope_layers);
  CHECK(back.rope.type == c.rope.type && back.rope.theta == c.rope.theta);
  CHECK(back.arch.moe.experts == c.arch.moe.experts);
  return 0;
}
