// A model family: what one config.json `model_type` means beyond the dimensions every decoder
// has. Each family is one file in model/families/ (the config keys it reads into the
// Architecture, with its defaults and refusals, and its GGUF names) and one line in
// families/registry.cpp. A family holds no forward code: the shared blocks (model/llama.h,
// model/attention.h) read the Architecture, and new math goes into them or into ops/.
// How to add one: docs/families.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"

namespace ctune::model {

struct ModelConfig;

// How llama.cpp names this family's files (docs/formats.md#gguf-tensor-names).
struct GgufNames {
  std::string architecture{};  // general.architecture; empty: no GGUF form
  // llama.cpp's `llama` applies RoPE to rows in interleaved order, so its converter permutes
  // q_proj/k_proj rows; the other architectures keep Hugging Face's order.
  bool permuted_qk = false;
  // Per-layer tensors: Hugging Face module path in the layer -> GGUF short name.
  std::vector<std::pair<std::string, std::string>> layer_tensors{};
  // The file stores every RMSNorm weight as 1 + w (convert_hf_to_gguf's Gemma): llama.cpp
  // scales by the stored value, ctune's (1 + w) norms by one plus theirs.
  bool norm_plus_one = false;
  // Sparse layers: the experts' module path in the layer ("mlp.experts") and each expert
  // projection's GGUF name. llama.cpp stacks a layer's experts into one tensor per projection,
  // PyTorch shape [experts, out, in] (ffn_gate_exps, ffn_up_exps, ffn_down_exps); the router is
  // an ordinary layer tensor (ffn_gate_inp). Empty: a dense family.
  std::string experts_module{};
  std::vector<std::pair<std::string, std::string>> expert_tensors{};
};

// A multimodal checkpoint whose text model ctune trains (Gemma 3's Gemma3ForConditionalGeneration):
// how to find the text model's config and tensors in it. Everything else (vision tower,
// projector) is ignored, with a note; ctune writes what it trains as the text model alone.
struct Wrapper {
  // config.json -> the text model's config.json (with the wrapper's dtype and token ids where
  // the text part has none).
  Json (*text_config)(const Json& json, const std::string& where) = nullptr;
  // Where the text model's tensors live: a text-model name "model.X" is looked up as
  // prefix + "X" for each prefix in turn (transformers' two spellings), lm_head.weight as each
  // of head_names.
  std::vector<std::string> model_prefixes{};
  std::vector<std::string> head_names{};
  std::vector<std::string> ignored_prefixes{};  // tensors that are not the text model's
};

struct Family {
  std::string name;                      // the model_type this file reads: "qwen3"
  std::vector<std::string> model_types{};  // every config.json model_type it reads
  std::int64_t default_max_position = 2048;
  std::optional<std::int64_t> default_head_dim{};  // when config.json has none (else hidden / heads)
  // Reads the family's own keys into `config.arch` (the shared dimensions are already read);
  // throws ConfigError / UnsupportedError naming the key for anything it cannot honour.
  void (*parse)(const Json& json, const std::string& where, ModelConfig& config) = nullptr;
  GgufNames gguf{};
  double default_rope_theta = 10000.0;  // when config.json has no rope_theta
  bool default_tied = false;            // when config.json has no tie_word_embeddings
  std::optional<Wrapper> wrapper{};     // set for a multimodal wrapper (then parse is unused)
  bool partial_rotary = false;          // honours partial_rotary_factor (else refuses one != 1)
};

// The family reading `model_type`; UnsupportedError (naming every supported type) when none does.
const Family& family_for_model_type(const std::string& model_type, const std::string& where);
// The family llama.cpp's `general.architecture` value belongs to, with or without experts (a
// `llama` file with expert_count is Mixtral's); nullptr when none.
const Family* family_for_gguf_architecture(const std::string& architecture, bool experts);
// Every registered family, in registry order.
const std::vector<const Family*>& all_families();

// The decoder layer's tensors as llama.cpp's `llama` names them; families extend it.
std::vector<std::pair<std::string, std::string>> llama_gguf_layer_tensors();
// The expert projections' stacked names: {gate, up, down} module names -> ffn_{gate,up,down}_exps.
std::vector<std::pair<std::string, std::string>> gguf_expert_tensors(const std::string& gate, const std::string& up,
                                                                     const std::string& down);

}  // namespace ctune::model
