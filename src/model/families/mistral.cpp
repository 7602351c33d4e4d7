// Mistral: Llama's block and keys, and a sliding window on every layer whenever
// `sliding_window` is set (MistralConfig; null: none).
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  parse_llama_keys(j, where, c);
  if (const auto window = read_sliding_window(j, where))
    c.arch.layer_windows.assign(static_cast<std::size_t>(c.num_hidden_layers), *window);
}
}  // namespace

const Family& mistral() {
  // llama.cpp reads Mistral checkpoints as `llama` (convert_hf_to_gguf's MistralForCausalLM).
  static const Family f{"mistral", {"mistral"}, 2048, std::nullopt, parse, {"llama", true, llama_gguf_layer_tensors()}};
  return f;
}

}  // namespace ctune::model::families
