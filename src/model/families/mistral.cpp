// Mistral: Llama's block and Llama's keys; its checkpoints set `sliding_window`, which Llama's
// parse applies whenever it is set.
#include "model/families/families.h"

namespace ctune::model::families {

const Family& mistral() {
  // llama.cpp reads Mistral checkpoints as `llama` (convert_hf_to_gguf's MistralForCausalLM).
  static const Family f{"mistral", {"mistral"}, 2048, std::nullopt, llama().parse, {"llama", true, llama_gguf_layer_tensors()}};
  return f;
}

}  // namespace ctune::model::families
