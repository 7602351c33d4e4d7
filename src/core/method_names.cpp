#include "core/method_names.h"

namespace ctune {

const std::vector<MethodNames>& method_table() {
  static const std::vector<MethodNames> table = {
      {MethodKind::full, "none", "full", "full fine-tuning", "model", "config.json"},
      {MethodKind::lora, "lora", "lora", "LoRA", "adapter", "adapter_config.json"},
  };
  return table;
}

const MethodNames& method_names(MethodKind kind) {
  for (const auto& m : method_table())
    if (m.kind == kind) return m;
  return method_table().front();  // unreachable: every kind has a row
}

const MethodNames* find_method(const std::string& name) {
  for (const auto& m : method_table())
    if (name == m.recipe || name == m.state) return &m;
  return nullptr;
}

std::vector<std::string> recipe_method_names() {
  std::vector<std::string> out;
  for (const auto& m : method_table()) out.push_back(m.recipe);
  return out;
}

}  // namespace ctune
