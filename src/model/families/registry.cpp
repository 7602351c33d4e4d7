// The registry: one line per family (model/family.h). Adding a family adds its file (which
// the build picks up: src/model/CMakeLists.txt) and its line here, declaration and entry.
#include <algorithm>

#include "core/error.h"
#include "model/families/families.h"
#include "model/family.h"

namespace ctune::model {

namespace families {
const Family& llama();
const Family& mistral();
const Family& qwen2();
const Family& qwen3();
const Family& smollm3();
const Family& gemma2();
const Family& gemma3_text();
const Family& gemma3();  // the multimodal wrapper, read as its text model
const Family& phi3();
const Family& mixtral();
const Family& qwen3_moe();
const Family& qwen3_5_text();
const Family& qwen3_5();  // the multimodal wrapper, read as its text model
const Family& qwen3_5_moe_text();
const Family& qwen3_5_moe();  // the multimodal wrapper, read as its text model
const Family& qwen3_next();
const Family& gpt_oss();
}  // namespace families

const std::vector<const Family*>& all_families() {
  static const std::vector<const Family*> all = {
      &families::llama(),
      &families::mistral(),
      &families::qwen2(),
      &families::qwen3(),
      &families::smollm3(),
      &families::gemma2(),
      &families::gemma3_text(),
      &families::gemma3(),
      &families::phi3(),
      &families::mixtral(),
      &families::qwen3_moe(),
      &families::qwen3_5_text(),
      &families::qwen3_5(),
      &families::qwen3_5_moe_text(),
      &families::qwen3_5_moe(),
      &families::qwen3_next(),
      &families::gpt_oss(),
  };
  return all;
}

const Family& family_for_model_type(const std::string& model_type, const std::string& where) {
  std::string supported;
  for (const Family* f : all_families()) {
    if (std::find(f->model_types.begin(), f->model_types.end(), model_type) != f->model_types.end()) return *f;
    for (const auto& t : f->model_types) supported += (supported.empty() ? "" : ", ") + t;
  }
  throw UnsupportedError(where + ": model_type \"" + model_type + "\" is not supported (supported: " + supported + ")");
}

const Family* family_for_gguf_architecture(const std::string& architecture, bool experts) {
  for (const Family* f : all_families())
    if (!f->gguf.architecture.empty() && f->gguf.architecture == architecture && f->gguf.experts == experts)
      return f;
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> llama_gguf_layer_tensors() {
  return {
      {"input_layernorm", "attn_norm"},    {"self_attn.q_proj", "attn_q"},       {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},  {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},            {"mlp.down_proj", "ffn_down"},
  };
}

std::vector<std::pair<std::string, std::string>> gguf_expert_tensors(const ModuleNames& names) {
  return {{names.expert_gate, "ffn_gate_exps"}, {names.expert_up, "ffn_up_exps"}, {names.expert_down, "ffn_down_exps"}};
}

}  // namespace ctune::model
