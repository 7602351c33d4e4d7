// The conformance case list. How llama.cpp's results are compared, and the tolerances derived for
// each kind of file, are in test_llama_cpp.cpp. Measured on AMD EPYC (Zen 5) for the record:
//   F32 files           spread of dlogp 8e-6 to 2.1e-5 (tolerance 2.3e-4 to 5.2e-4); the shift of
//                       128k+ vocabularies (llama.cpp's float sum over the vocabulary) 4e-4 to
//                       5.2e-4 (tolerance V u32 ~ 8e-3 to 9e-3)
//   BF16, Q8_0 files    against the rebuild with ggml's activation rounding: 1.8e-4 and 5e-6
//   F16 file            7e-3 from the rounding rebuild (Intel: 4.9e-3 from the F32 one), 2 D = 0.026
//   Gemma F32 files     spread 1.5e-3 to 3.4e-3 against references with ggml's f16-table GELU
//                       (tolerance 0.034 to 0.070: their float32 noise includes table flips);
//                       1.3e-2 against the exact GELU
//   Qwen3.5 F32 file    (Gated DeltaNet; its float32 noise is ~10x Llama's) spread 7.9e-4,
//                       tolerance 2.8e-3 (node-llama-cpp 3.22.1; 3.21.1 measured 1.46e-4)
//   Qwen3.5-MoE F32     spread 7.7e-4, tolerance 5.1e-3 (3.21.1: 2.06e-4)
//   Qwen3.5 GGUF LoRA   spread 8.4e-4 (tolerance 5.1e-3), MoE expert LoRA 2.1e-3 (9.2e-3), 3.22.1;
//                       their export self-checks (unmerged vs merged) 1.7e-4 and 2.4e-4, past
//                       1e-4, within 8x the models' measured float32 noise (1.2e-4, 3.4e-4)
// Greedy continuations must match for all 40 tokens in every case.
#include "conformance_cases.h"

namespace ctune::exporter::test {

const std::vector<ConformanceCase>& conformance_cases() {
  static const std::vector<ConformanceCase> cases = [] {
    std::vector<ConformanceCase> c;
    auto add = [&](ConformanceCase x) { c.push_back(std::move(x)); };
    add({"llama_f32", "llama_byte", "", "llama_byte.f32.gguf", "", "f32", true});
    add({"llama_f16", "llama_byte", "", "llama_byte.f16.gguf", "", "f16", false});
    add({"llama_bf16", "llama_byte", "", "llama_byte.bf16.gguf", "", "bf16", false});
    add({"llama_q8_0", "llama_byte", "", "llama_byte.q8_0.gguf", "", "q8_0", false});
    add({"mistral_linear_rope", "mistral_linear", "", "mistral_linear.f32.gguf", "", "f32", false});
    add({"llama3_rope_scaling_llama3_tokenizer", "llama3_rope", "", "llama3_rope.f32.gguf", "", "f32", true});
    add({"qwen2_biases_qwen3_tokenizer", "qwen2_qwen3tok", "", "qwen2_qwen3tok.f32.gguf", "", "f32", true});
    add({"llama_sentencepiece_model", "llama_spm", "", "llama_spm.f32.gguf", "", "f32", true});
    add({"llama_llama2_tokenizer_json", "llama2_json", "", "llama2_json.f32.gguf", "", "f32", true});
    add({"llama_merged_lora", "llama_byte", "llama_byte_lora", "llama_byte_merged.f32.gguf", "", "f32", false});
    add({"llama_gguf_lora", "llama_byte", "llama_byte_lora", "llama_byte.f32.gguf", "llama_byte_lora.gguf", "f32", false});
    add({"qwen2_gguf_rslora", "qwen2_byte", "qwen2_byte_lora", "qwen2_byte.f32.gguf", "qwen2_byte_lora.gguf", "f32", false});
    add({"qwen3_qk_norm_qwen3_tokenizer", "qwen3_qwen3tok", "", "qwen3_qwen3tok.f32.gguf", "", "f32", false});
    add({"qwen3_f32", "qwen3_byte", "", "qwen3_byte.f32.gguf", "", "f32", false});
    add({"qwen3_gguf_lora", "qwen3_byte", "qwen3_byte_lora", "qwen3_byte.f32.gguf", "qwen3_byte_lora.gguf", "f32", false});
    add({"gemma2_caps_windows_f32", "gemma2_byte", "", "gemma2_byte.f32.gguf", "", "f32", false});
    add({"gemma3_local_global_f32", "gemma3_byte", "", "gemma3_byte.f32.gguf", "", "f32", false});
    add({"gemma3_gguf_lora", "gemma3_byte", "gemma3_byte_lora", "gemma3_byte.f32.gguf", "gemma3_byte_lora.gguf", "f32", false});
    add({"phi3_longrope_partial_f32", "phi3_byte", "", "phi3_byte.f32.gguf", "", "f32", false});
    add({"phi3_gguf_lora", "phi3_byte", "phi3_byte_lora", "phi3_byte.f32.gguf", "phi3_byte_lora.gguf", "f32", false});
    add({"smollm3_nope_f32", "smollm3_byte", "", "smollm3_byte.f32.gguf", "", "f32", false});
    add({"qwen3moe_experts_f32", "qwen3moe_byte", "", "qwen3moe_byte.f32.gguf", "", "f32", false});
    add({"qwen3moe_gguf_lora_experts", "qwen3moe_byte", "qwen3moe_byte_lora", "qwen3moe_byte.f32.gguf", "qwen3moe_byte_lora.gguf", "f32", false});
    add({"mixtral_experts_f32", "mixtral_byte", "", "mixtral_byte.f32.gguf", "", "f32", false});
    add({"mixtral_merged_lora_experts", "mixtral_byte", "mixtral_byte_lora", "mixtral_byte_merged.f32.gguf", "", "f32", false});
    add({"mixtral_gguf_lora_experts", "mixtral_byte", "mixtral_byte_lora", "mixtral_byte.f32.gguf", "mixtral_byte_lora.gguf", "f32", false});
    add({"qwen35_hybrid_deltanet_f32", "qwen35_byte", "", "qwen35_byte.f32.gguf", "", "f32", false});
    add({"qwen35_gguf_lora", "qwen35_byte", "qwen35_byte_lora", "qwen35_byte.f32.gguf", "qwen35_byte_lora.gguf", "f32", false});
    add({"qwen35moe_experts_f32", "qwen35moe_byte", "", "qwen35moe_byte.f32.gguf", "", "f32", false});
    add({"qwen35moe_gguf_lora_experts", "qwen35moe_byte", "qwen35moe_byte_lora", "qwen35moe_byte.f32.gguf", "qwen35moe_byte_lora.gguf",
         "f32", false});
    return c;
  }();
  return cases;
}

const std::vector<std::string>& tokenization_texts() {
  static const std::vector<std::string> texts = {
      "Hello world! The quick brown fox jumps over the lazy dog.",
      "In 2024, 17 of 32 tests passed (53.1%): x = y + 12345;",
      "  two leading spaces, a\ttab and\nnew lines\n\nend  ",
      "caf\xC3\xA9 na\xC3\xAFve \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE2\x9C\x93",
  };
  return texts;
}

}  // namespace ctune::exporter::test
