// GGUF export, the entry points behind `ctune export`:
//   export_gguf_model  a Hugging Face model directory (plus an optional PEFT LoRA adapter,
//                      merged in fp32 first) -> one GGUF model file llama.cpp loads;
//   export_gguf_lora   a PEFT LoRA adapter -> a GGUF LoRA adapter for the same base.
// Both end with the self-check of self_check.h and write the output atomically, only once the
// check has passed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "export/self_check.h"
#include "io/gguf_types.h"

namespace ctune::exporter {

struct GgufExportOptions {
  std::filesystem::path model_dir;    // Hugging Face model directory (config, weights, tokenizer)
  std::filesystem::path adapter_dir;  // PEFT adapter; empty for none (required for LoRA export)
  std::filesystem::path out;          // the .gguf file to write
  io::GgmlType type = io::GgmlType::F32;  // storage of 2-D weights
  bool overwrite = false;
};

struct GgufExportReport {
  std::string architecture;
  std::size_t tensors = 0;
  std::uintmax_t bytes = 0;
  CheckResult check;
};

// "f32", "f16", "bf16", "q8_0" (also "fp32", "fp16"). ConfigError naming `where` otherwise.
io::GgmlType parse_gguf_type(const std::string& name, const std::string& where);
const char* gguf_type_label(io::GgmlType type);  // "f32", "f16", "bf16", "q8_0"

GgufExportReport export_gguf_model(const GgufExportOptions& options);

// LoRA tensors are F32, F16 or BF16 (their rows are rank-long, too short for Q8_0 blocks).
GgufExportReport export_gguf_lora(const GgufExportOptions& options);

}  // namespace ctune::exporter
