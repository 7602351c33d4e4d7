// Model configuration read from a Hugging Face config.json (torch-free): the dimensions every
// decoder has, read here, and the Architecture, which the config's family reads (model/family.h,
// one file per family in model/families/). Both the v4 (rope_theta/rope_scaling, torch_dtype)
// and v5 (rope_parameters, dtype) spellings. Anything the model cannot honour is refused here,
// with the key and the value, before a tensor is allocated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace ctune::model {

// One projection of a decoder layer: W is [out, in], with a bias or not.
struct ProjectionShape {
  std::int64_t in = 0, out = 0;
  bool bias = false;
};

struct RopeConfig {
  std::string type = "default";  // default | linear | llama3
  double theta = 10000.0;
  double factor = 1.0;                        // linear, llama3
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  std::int64_t original_max_position = 8192;  // llama3
};

// What varies between families, as data the shared blocks read (docs/families.md).
struct Architecture {
  bool qkv_bias = false;  // biases on q/k/v_proj
  bool o_bias = false;    // a bias on o_proj
  bool mlp_bias = false;  // biases on gate/up/down_proj
  // RMSNorm over head_dim on each query and key head (self_attn.q_norm, k_norm: [head_dim]),
  // after the projections and before RoPE (Qwen3).
  bool qk_norm = false;
  // Per layer, the attention window: a query attends to the `w` most recent positions, itself
  // included (q - k < w); 0: the whole causal context. Empty when every layer is global.
  std::vector<std::int64_t> layer_windows;
  // Per layer, whether RoPE rotates q and k (SmolLM3's NoPE layers: false). Empty: every layer.
  std::vector<bool> rope_layers;

  bool rope(std::int64_t layer) const {
    return layer >= static_cast<std::int64_t>(rope_layers.size()) || rope_layers[static_cast<std::size_t>(layer)];
  }

  std::int64_t window(std::int64_t layer) const {
    return layer < static_cast<std::int64_t>(layer_windows.size()) ? layer_windows[static_cast<std::size_t>(layer)] : 0;
  }
  // The largest window of any layer; nullopt when every layer is global.
  std::optional<std::int64_t> sliding_window() const;
};

struct ModelConfig {
  std::string model_type;  // as config.json says it; its family reads it (model/family.h)
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  Architecture arch;
  std::string dtype = "float32";                // torch_dtype / dtype as written
  double initializer_range = 0.02;
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;
  std::optional<std::int64_t> pad_token_id;

  Json raw;  // the file as read, so a written config keeps keys ctune does not use

  std::int64_t kv_groups() const { return num_attention_heads / num_key_value_heads; }
  // The projection called `name` (q_proj ... down_proj of the Llama block).
  ProjectionShape projection(const std::string& name) const;
};

// config.json's sliding_window: positive, or nullopt when absent or null.
std::optional<std::int64_t> read_sliding_window(const Json& json, const std::string& where);

// `where` names the source in messages (usually the config.json path).
ModelConfig parse_model_config(const Json& json, const std::string& where);
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// The ids generation stops on: config.json's eos_token_id and, when `model_dir` has one,
// generation_config.json's (Llama 3 instruct checkpoints list <|eot_id|> only there).
std::vector<std::int64_t> generation_stop_ids(const ModelConfig& config, const std::filesystem::path& model_dir);

// The config as config.json, with dtype keys set to `dtype` ("float32", "bfloat16", "float16").
Json config_to_json(const ModelConfig& config, const std::string& dtype);

}  // namespace ctune::model
