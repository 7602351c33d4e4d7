// Qwen2 / Qwen2.5: biases on q/k/v always (none on o_proj); the window only with
// use_sliding_window.
#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"

namespace ctune::model::families {

namespace {
void parse(const Json& j, const std::string& where, ModelConfig& c) {
  c.arch.qkv_bias = true;
  c.arch.o_bias = false;
  c.arch.mlp_bias = json_bool(j, "mlp_bias", where).value_or(false);
  c.arch.sliding_window = read_sliding_window(j, where, json_bool(j, "use_sliding_window", where).value_or(false));
}
}  // namespace

const Family& qwen2() {
  static const Family f{"qwen2", {"qwen2"}, 32768, std::nullopt, parse, {"qwen2", false, llama_gguf_layer_tensors()}};
  return f;
}

}  // namespace ctune::model::families
