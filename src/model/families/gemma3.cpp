// Gemma 3 text (modeling_gemma3.py, Gemma3TextConfig): Gemma 2's body (families/gemma2.cpp)
// without its soft-caps by default, plus
//   - a (1 + w) RMSNorm over head_dim on every query and key head before RoPE (q_norm, k_norm);
//   - local and global layers: layer_types, or by default every sliding_window_pattern-th
//     layer (6) global and the rest local, with a window of sliding_window (default 4096);
//   - local layers rotate with rope_local_base_freq (default 10000), global ones with
//     rope_theta (default 1e6) and rope_scaling; transformers v5 writes both as
//     rope_parameters.{sliding_attention, full_attention}.
// final_logit_softcapping is honoured when set (null in released checkpoints).
// attn_logit_softcapping is read by Gemma3TextConfig but not applied by its attention, so it is
// not applied here either. Defaults: head_dim 256, tied head, 131072 positions.
// `gemma3` (Gemma3ForConditionalGeneration: Gemma-3-4B and larger) is read as its text model:
// text_config with Gemma3TextConfig's defaults for the sizes it leaves out, the tensors under
// language_model.model. (transformers < 4.52) or model.language_model. (later); the vision tower
// and projector are ignored.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

namespace ctune::model::families {

namespace {

std::vector<bool> sliding_layers(const Json& j, const std::string& where, std::int64_t layers) {
  if (auto given = read_layer_types(j, where, layers)) return *given;
  const std::int64_t pattern = json_int(j, "sliding_window_pattern", where).value_or(6);
  if (pattern <= 0) throw ConfigError(where + ": sliding_window_pattern must be positive, found " + std::to_string(pattern));
  std::vector<bool> sliding;
  for (std::int64_t i = 0; i < layers; ++i) sliding.push_back((i + 1) % pattern != 0);
  return sliding;
}

// Global and local RoPE, from either spelling.
void read_ropes(const Json& j, const std::string& where, ModelConfig& c) {
  RopeConfig local;
  const auto it = j.find("rope_parameters");
  if (it != j.end() && it->is_object() && (it->contains("full_attention") || it->contains("sliding_attention"))) {
    auto section = [&](const char* type, double default_theta) {
      Json wrapper = Json::object();
      if (it->contains(type) && !(*it)[type].is_null()) wrapper["rope_parameters"] = (*it)[type];
      return parse_rope(wrapper, where + ": rope_parameters." + type, default_theta);
    };
    c.rope = section("full_attention", 1000000.0);
    local = section("sliding_attention", 10000.0);
  } else {
    local.theta = json_number(j, "rope_local_base_freq", where).value_or(10000.0);  // c.rope: rope_theta + rope_scaling
    if (!(local.theta > 0)) throw ConfigError(where + ": rope_local_base_freq must be positive, found " + std::to_string(local.theta));
  }
  c.arch.local_rope = local;
}

void parse(const Json& j, const std::string& where, ModelConfig& c) {
  parse_gemma_keys(j, where, c);
  if (json_bool(j, "use_bidirectional_attention", where).value_or(false)) {
    throw UnsupportedError(where + ": use_bidirectional_attention true (an embedding model) is not supported; "
                                   "ctune trains causal language models (expected false)");
  }
  c.arch.qk_norm = true;
  c.arch.final_softcap = read_softcap(j, where, "final_logit_softcapping", 0.0);
  const auto sliding = sliding_layers(j, where, c.num_hidden_layers);
  read_ropes(j, where, c);
  c.arch.local_rope_layers = sliding;
  c.arch.layer_windows = gemma_layer_windows(j, where, sliding);
}

// Gemma3TextConfig's defaults, which a gemma3 wrapper's text_config relies on (Gemma-3-4B's
// lists only its sizes, window and rope_scaling).
Json gemma3_text_config(const Json& j, const std::string& where) {
  Json text = Json::object();
  if (const auto it = j.find("text_config"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) throw ConfigError(where + ": \"text_config\" must be an object, found " + json_type_name(*it));
    text = *it;
  }
  if (const auto type = json_string(text, "model_type", where + ": text_config"); type && *type != "gemma3_text") {
    throw UnsupportedError(where + ": text_config model_type \"" + *type + "\" is not supported (expected gemma3_text)");
  }
  const Json defaults = {{"vocab_size", 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216},
                         {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
                         {"head_dim", 256}, {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6},
                         {"rope_theta", 1000000.0}, {"rope_local_base_freq", 10000.0}, {"query_pre_attn_scalar", 256},
                         {"sliding_window", 4096}, {"hidden_activation", "gelu_pytorch_tanh"}};
  for (auto it = defaults.begin(); it != defaults.end(); ++it)
    if (!text.contains(it.key())) text[it.key()] = it.value();
  // The wrapper's own keys the text model needs when its part has none.
  inherit_wrapper_keys(j, text);
  text["model_type"] = "gemma3_text";
  text["architectures"] = Json::array({"Gemma3ForCausalLM"});
  return text;
}

constexpr LlamaCppGemma kGemma3{"gemma3", 6, 62};

// llama.cpp's gemma3: no attention soft-cap, the local layers' RoPE fixed.
void check_gguf(const ModelConfig& c) {
  check_gemma_gguf(c, kGemma3);
  const std::string what = gguf_refusal(c);
  if (c.arch.attn_softcap > 0) throw UnsupportedError(what + "attention soft-caps have no gemma3 GGUF form");
  const auto& local = c.arch.local_rope;
  if (!local || local->type != "default" || local->theta != 10000.0)
    throw UnsupportedError(what + "llama.cpp's gemma3 fixes the local layers' RoPE at theta 10000, unscaled");
  refuse_gemma_rope_freqs(c, kGemma3);
}

void read_gguf(const GgufKeys& keys, ModelConfig& c) {
  read_gemma_gguf(keys, c, kGemma3, 0.0, keys.number_or("final_logit_softcapping", 0.0), 0);
  if (c.arch.layer_windows.empty()) return;
  c.arch.local_rope = RopeConfig{};  // theta 10000, unscaled
  for (const auto w : c.arch.layer_windows) c.arch.local_rope_layers.push_back(w > 0);
}

}  // namespace

const Family& gemma3() {
  static const Family f = [] {
    Family w{"gemma3", {"gemma3"}};
    w.wrapper = Wrapper{gemma3_text_config,
                        {"model.language_model.", "language_model.model."},
                        {"lm_head.weight", "language_model.lm_head.weight"},
                        {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."}};
    return w;
  }();
  return f;
}

const Family& gemma3_text() {
  static const Family f = [] {
    auto tensors = gemma_gguf_layer_tensors();
    tensors.insert(tensors.end(), {{"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"}});
    Family g{"gemma3_text", {"gemma3_text"}, 131072, 256, parse, {"gemma3", false, tensors, true}, 1000000.0, true};
    g.gguf.windows = GgufForm::Windows::carried;
    g.gguf.check = check_gguf;
    g.gguf.write_keys = write_gemma_gguf;
    g.gguf.read_keys = read_gguf;
    return g;
  }();
  return f;
}

}  // namespace ctune::model::families
