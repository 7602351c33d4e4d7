// A family's module names in a decoder layer (torch-free). One file so that the config and the
// family both hold the table without including each other.
#pragma once

#include <string>

namespace ctune::model {

// A family's module names in a decoder layer, as its checkpoints spell them (Family::names,
// copied here by the config's reader so the shared blocks and the weight loader read names,
// not a family). The defaults are Llama's and Qwen3-MoE's; Mixtral's sparse block is
// block_sparse_moe.{gate, experts.N.{w1, w3, w2}} (docs/families.md#how-to-add-a-family).
struct ModuleNames {
  std::string mlp = "mlp";  // the dense MLP of a layer
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";  // its projections
  std::string sparse_mlp = "mlp";  // a sparse layer's block: its `router`, its `experts.N`
  std::string router = "gate";     // gpt-oss: "router"
  std::string expert_gate = "gate_proj", expert_up = "up_proj", expert_down = "down_proj";  // each expert's
  // A sparse block's shared expert (an MLP under the dense projection names) and its scalar
  // gate, where MoeArchitecture::shared_intermediate sets one (Qwen2-MoE's names, Qwen3.5-MoE's).
  std::string shared_expert = "shared_expert", shared_expert_gate = "shared_expert_gate";
};

}  // namespace ctune::model
