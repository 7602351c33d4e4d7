// A model family: what one config.json `model_type` means beyond the dimensions every decoder
// has. Each family is one file in model/families/ (the config keys it reads into the
// Architecture, with its defaults and refusals; its module names; its GGUF form: names, checks
// and the keys only its architecture has) and one line in families/registry.cpp. A family
// holds no forward code: the shared blocks (model/decoder.h, model/attention.h) read the
// Architecture, and new math goes into them or into ops/. How to add one: docs/families.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "model/module_names.h"

namespace ctune::model {

struct ModelConfig;
class GgufKeys;       // model/families/gguf_keys.h
class GgufKeyWriter;  // model/families/gguf_keys.h

// A change llama.cpp's converter makes to one per-layer parameter's values or shape beyond its
// name (Qwen3.5's DeltaNet). Torch-free: export applies a parameter's changes in order (the
// arithmetic is export/gguf_tensors.cpp's) and the read-back undoes them in reverse.
struct GgufChange {
  enum class Kind {
    negative_exp,  // w -> -exp(w) (A_log -> ssm_a)
    drop_dim1,     // [C, 1, K] -> [C, K] (a depthwise convolution's weight)
    // Along `dim`, the groups * per_group * width entries from `offset`, seen as
    // [groups, per_group, width], reordered to [per_group, groups, width]: heads grouped by the
    // key head they share become tiled, the order ggml's broadcast repeats key heads in.
    tile_heads,
  };
  std::string param;  // its path in a layer: "linear_attn.A_log", "linear_attn.out_proj.weight"
  Kind kind = Kind::negative_exp;
  std::int64_t dim = 0, offset = 0, groups = 0, per_group = 0, width = 0;  // tile_heads
};

// llama.cpp's reader of one architecture: the data it needs (names, row order, experts) and the
// hooks for the keys only this architecture has. export/gguf_metadata.cpp writes and reads the
// keys every architecture has and calls these for the rest (docs/formats.md#gguf-model-keys).
// A family with no GGUF form leaves `architecture` empty.
struct GgufForm {
  std::string architecture{};  // general.architecture; empty: no GGUF form
  // llama.cpp's `llama` applies RoPE to rows in interleaved order, so its converter permutes
  // q_proj/k_proj rows; the other architectures keep Hugging Face's order.
  bool permuted_qk = false;
  // Per-layer tensors: Hugging Face module path in the layer -> GGUF short name.
  std::vector<std::pair<std::string, std::string>> layer_tensors{};
  // The file stores every RMSNorm weight as 1 + w (convert_hf_to_gguf's Gemma): llama.cpp
  // scales by the stored value, ctune's (1 + w) norms by one plus theirs.
  bool norm_plus_one = false;
  // Sparse layers: llama.cpp stacks a layer's experts into one tensor per projection, PyTorch
  // shape [experts, out, in] (ffn_gate_exps, ffn_up_exps, ffn_down_exps), named from the
  // family's ModuleNames; the router is an ordinary layer tensor (ffn_gate_inp). A file of this
  // architecture with expert_count is this family's only when `experts` is set (Mixtral is
  // `llama` with experts).
  bool experts = false;
  // Sliding windows: carried by the file (Gemma), written but ignored by llama.cpp (phi3), or
  // not written; export warns for the last two that outputs agree up to the window only.
  enum class Windows { dropped, ignored, carried };
  Windows windows = Windows::dropped;
  // Refuses (UnsupportedError, naming the config value) what this architecture cannot express;
  // nullptr: everything the shared keys carry is expressible.
  void (*check)(const ModelConfig& config) = nullptr;
  // Writes this architecture's own keys after the shared ones; nullptr: none.
  void (*write_keys)(GgufKeyWriter& keys, const ModelConfig& config) = nullptr;
  // Reads them back into `config`, whose shared keys and tensor-implied flags are already read;
  // sets what llama.cpp fixes for this architecture. nullptr: nothing more.
  void (*read_keys)(const GgufKeys& keys, ModelConfig& config) = nullptr;
  // With norm_plus_one: the norms stored as w, paths in a layer (Qwen3.5's linear_attn.norm
  // scales by w where its other norms scale by 1 + w).
  std::vector<std::string> plain_norms{};
  // Per-layer parameters that are not a module's weight or bias: path in the layer -> GGUF name
  // in the block, suffix included ("linear_attn.A_log" -> "ssm_a", "linear_attn.dt_bias" ->
  // "ssm_dt.bias").
  std::vector<std::pair<std::string, std::string>> layer_parameters{};
  // Per-layer parameters stored F32 whatever the requested type (paths in a layer): llama.cpp
  // reads them with F32-only operations (ggml_ssm_conv's kernel).
  std::vector<std::string> f32_parameters{};
  // The changes the converter makes to this config's parameters (GgufChange); nullptr: none.
  std::vector<GgufChange> (*changes)(const ModelConfig& config) = nullptr;
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

// One checkpoint tensor of a decoder layer that holds several of the model's parameters, their
// rows interleaved by group (Qwen3-Next's linear_attn.in_proj_qkvz: per key head its q, k, v and
// z rows). Seen as [groups, Σ rows, ...], a piece is `rows` consecutive rows of every group; a
// parameter is its pieces in the order listed, each piece's groups one after the other. The
// loader gathers each parameter's rows out of the tensor and the writer interleaves them back:
// the same bytes (model/weights.h).
struct FusedTensor {
  struct Piece {
    std::string param;  // path in the layer: "linear_attn.in_proj_qkv.weight"
    std::int64_t rows = 0;  // per group
  };
  std::string name;  // path in the layer: "linear_attn.in_proj_qkvz.weight"
  std::int64_t groups = 1;
  std::vector<Piece> pieces{};  // in each group's row order
};

struct Family {
  std::string name;                      // the model_type this file reads: "qwen3"
  std::vector<std::string> model_types{};  // every config.json model_type it reads
  std::int64_t default_max_position = 2048;
  std::optional<std::int64_t> default_head_dim{};  // when config.json has none (else hidden / heads)
  // Reads the family's own keys into `config.arch` (the shared dimensions are already read);
  // throws ConfigError / UnsupportedError naming the key for anything it cannot honour.
  void (*parse)(const Json& json, const std::string& where, ModelConfig& config) = nullptr;
  GgufForm gguf{};
  double default_rope_theta = 10000.0;  // when config.json has no rope_theta
  bool default_tied = false;            // when config.json has no tie_word_embeddings
  std::optional<Wrapper> wrapper{};     // set for a multimodal wrapper (then parse is unused)
  bool partial_rotary = false;          // honours partial_rotary_factor (else refuses one != 1)
  bool yarn = false;                    // reads rope type yarn (else refuses it)
  ModuleNames names{};                  // its module names, copied into Architecture::names
  // Tensors its checkpoints carry that are not the causal LM (Qwen3.5's multi-token-prediction
  // head, mtp.*): not loaded, counted in the loader's note.
  std::vector<std::string> ignored_prefixes{};
  // Every layer may be sparse (Qwen3.5-MoE, Qwen3-Next): config.json need not have
  // intermediate_size (then 0, unless the family's parse sizes its dense layers).
  bool no_dense_mlp = false;
  // Parameters its checkpoints store fused (FusedTensor), in the layers that have them; nullptr:
  // every parameter is a tensor of its own.
  std::vector<FusedTensor> (*fused_tensors)(const ModelConfig& config) = nullptr;
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
// A sparse layer's stacked expert tensors: the family's per-expert names -> ffn_{gate,up,down}_exps.
std::vector<std::pair<std::string, std::string>> gguf_expert_tensors(const ModuleNames& names);

}  // namespace ctune::model
