// What a multimodal wrapper's text model takes from the wrapper (Gemma 3, Qwen3.5).
#include "model/families/families.h"

namespace ctune::model::families {

void inherit_wrapper_keys(const Json& wrapper, Json& text) {
  for (const char* key : {"torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings",
                          "initializer_range"}) {
    if (!text.contains(key) && wrapper.contains(key)) text[key] = wrapper[key];
  }
}

}  // namespace ctune::model::families
