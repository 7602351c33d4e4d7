// Tensor names between Hugging Face checkpoints and GGUF (llama.cpp's names): token_embd,
// output_norm, output, and per layer blk.N.<name>.{weight, bias} from the family's table
// (model/family.h: attn_norm, attn_q, ... ffn_down, and e.g. Qwen3's attn_q_norm; parameters
// that are not a module's, e.g. Qwen3.5's blk.N.ssm_a, by the family's own table); plus the
// architecture name llama.cpp knows a config by. Facts: docs/formats.md#gguf-tensor-names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "io/gguf_types.h"
#include "model/config.h"
#include "model/families/gguf_keys.h"
#include "model/family.h"

namespace ctune::exporter {

inline constexpr const char* kRopeFreqsName = "rope_freqs.weight";
// longrope (llama.cpp's phi3): the per-pair factors, each [rotary_dim / 2] in F32 (the names
// live with the families' GGUF forms, which read them back).
using model::kRopeFactorsLongName;
using model::kRopeFactorsShortName;

// The config's family's GGUF form (model/family.h); UnsupportedError for a family without one.
const model::GgufForm& gguf_form(const model::ModelConfig& config);
// Its general.architecture ("llama" for Llama, Mistral and Mixtral, "qwen2", "qwen3", ...).
std::string gguf_architecture(const model::ModelConfig& config);
// Whether llama.cpp's architecture for this config wants q/k rows permuted (its `llama`).
bool gguf_permutes_qk(const model::ModelConfig& config);
// Whether the HF tensor `hf_name` is an RMSNorm weight the GGUF file stores as 1 + w (Gemma).
bool gguf_shifts_norm(const model::ModelConfig& config, const std::string& hf_name);

// The changes the converter makes to the HF tensor `hf_name` (model/family.h's GgufChange), in
// the order export applies them; empty for most tensors.
std::vector<model::GgufChange> gguf_changes(const model::ModelConfig& config, const std::string& hf_name);
// The ggml type the HF tensor `hf_name` is stored as for `--type requested`: F32 for the
// family's f32_parameters, else storage_type's choice (gguf_tensors.h).
io::GgmlType gguf_storage_type(const model::ModelConfig& config, const std::string& hf_name, const at::Tensor& tensor,
                               io::GgmlType requested);

// "model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight" in the config's family;
// nullopt for a name with no GGUF counterpart.
std::optional<std::string> gguf_tensor_name(const model::ModelConfig& config, const std::string& hf_name);
// The inverse: "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight".
std::optional<std::string> hf_tensor_name(const model::ModelConfig& config, const std::string& gguf_name);

// An expert's part of a stacked tensor: "model.layers.3.mlp.experts.5.up_proj.weight" ->
// {"blk.3.ffn_up_exps.weight", 5} in Qwen3-MoE; nullopt for a name that is not an expert's.
struct ExpertSlot {
  std::string gguf;
  std::int64_t expert = 0;
};
std::optional<ExpertSlot> gguf_expert_slot(const model::ModelConfig& config, const std::string& hf_name);

// The GGUF tensors that named parameters (HF names, or a LoRA matrix keyed by its base weight's
// name) make, in order of first appearance: one parameter each, or every expert's of one sparse
// layer and projection, in expert order, stacked along a new first dimension. UnsupportedError
// for a name with no GGUF tensor; ShapeError when a stack lacks an expert or its parts differ.
struct GgufSource {
  std::string gguf;
  std::vector<std::pair<std::string, at::Tensor>> parts;
  bool stacked = false;
  at::Tensor value() const;  // the part, or the parts stacked (a new tensor)
};
std::vector<GgufSource> gguf_sources(const model::ModelConfig& config,
                                     const std::vector<std::pair<std::string, at::Tensor>>& named);

// Which attention projection a HF name belongs to: 'q', 'k' or 0 (the rows llama.cpp's NORM
// RoPE needs permuted are those of q_proj and k_proj, weight and bias).
char qk_projection(const std::string& hf_name);

}  // namespace ctune::exporter
