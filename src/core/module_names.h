// The names of the Llama family's linear modules as Hugging Face, PEFT and ctune's recipes spell
// them: the one list behind the recipe schema's LoRA targets, PEFT's "all-linear", quantised
// bases and the memory ledger. It lives in core, the lowest layer, because the recipe schema
// needs it and knows nothing of models.
#pragma once

#include <string>
#include <vector>

namespace ctune {

// The seven projections of a decoder layer (self_attn.*_proj, mlp.*_proj), in layer order.
inline const std::vector<std::string>& projection_names() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return names;
}

// Every linear module LoRA can target: the projections and the output head.
inline const std::vector<std::string>& linear_module_names() {
  static const std::vector<std::string> names = [] {
    auto n = projection_names();
    n.push_back("lm_head");
    return n;
  }();
  return names;
}

}  // namespace ctune
