// The training methods' names, in one table: how the recipe spells each (peft.method), how a
// checkpoint records it (trainer_state.json "method", Method::name()), how a person reads it
// (the report, logs) and what its result directory in output_dir is called. It lives in core
// because the recipe schema, the report and the training layer all need it and the schema knows
// nothing of models. The Method objects themselves are made by train::make_method.
#pragma once

#include <string>
#include <vector>

namespace ctune {

enum class MethodKind { full, lora };

struct MethodNames {
  MethodKind kind;
  const char* recipe;      // peft.method: "none" | "lora"
  const char* state;       // trainer_state.json and Method::name(): "full" | "lora"
  const char* title;       // "full fine-tuning" | "LoRA"
  const char* result_dir;  // output_dir/<result_dir>: "model" | "adapter"
  const char* result_config;  // the file a finished result holds: "config.json" | "adapter_config.json"
};

const std::vector<MethodNames>& method_table();
const MethodNames& method_names(MethodKind kind);
// By the recipe's or the checkpoint's spelling; nullptr when it is neither.
const MethodNames* find_method(const std::string& name);
// The recipe's spellings, for the schema's allowed values.
std::vector<std::string> recipe_method_names();

}  // namespace ctune
