// Preparation step of the llama.cpp conformance tests (`test_llama_cpp --prepare`, a CTest
// fixture): writes the tiny models and adapters, exports them with the real `ctune export`
// binary (so every export also passes ctune's self-check), and runs all cases through llama.cpp
// in one Node process. Results land in cases/results.json; the per-case tests compare them with
// ctune.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "conformance_cases.h"
#include "core/error.h"
#include "export_test_support.h"
#include "io/file.h"
#include "run_ctune.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::exporter::test {
namespace fs = std::filesystem;

namespace {

const char kPrompt[] = "Once upon a time, there was";

Json rope(const std::string& type, double factor) {
  Json j = {{"rope_type", type}, {"factor", factor}};
  if (type == "llama3") {
    j["low_freq_factor"] = 1.0;
    j["high_freq_factor"] = 4.0;
    j["original_max_position_embeddings"] = 32;
  }
  return j;
}

void make_models(const fs::path& cases) {
  TinyConfig llama;  // llama, byte tokenizer (258 ids, padded to 272), GQA 4/2, untied
  make_model(cases / "llama_byte", llama, "byte", 11);

  TinyConfig mistral;
  mistral.model_type = "mistral";
  mistral.vocab_size = 258;
  mistral.tie = true;
  mistral.rope_scaling = rope("linear", 4.0);
  make_model(cases / "mistral_linear", mistral, "byte", 12);

  TinyConfig llama3;  // llama3 rope scaling that changes most rotary pairs at these lengths
  llama3.vocab_size = 128256;
  llama3.tie = true;
  llama3.rope_scaling = rope("llama3", 8.0);
  make_model(cases / "llama3_rope", llama3, real_tokenizer("llama3").string(), 13);

  TinyConfig qwen;
  qwen.model_type = "qwen2";
  qwen.vocab_size = 151936;
  qwen.tie = true;
  qwen.rope_theta = 1000000.0;
  make_model(cases / "qwen2_qwen3tok", qwen, real_tokenizer("qwen3").string(), 14);

  TinyConfig spm;
  spm.vocab_size = 1000;
  make_model(cases / "llama_spm", spm, spm_model_dir().string(), 15);

  TinyConfig llama2;
  llama2.vocab_size = 32000;
  make_model(cases / "llama2_json", llama2, real_tokenizer("llama2").string(), 16);

  TinyConfig qwen_byte;
  qwen_byte.model_type = "qwen2";
  make_model(cases / "qwen2_byte", qwen_byte, "byte", 17);

  TinyConfig qwen3;  // per-head q/k norms, head_dim 32 != hidden / heads, tied, the Qwen3 tokenizer
  qwen3.model_type = "qwen3";
  qwen3.vocab_size = 151936;
  qwen3.tie = true;
  qwen3.head_dim = 32;
  qwen3.rope_theta = 1000000.0;
  make_model(cases / "qwen3_qwen3tok", qwen3, real_tokenizer("qwen3").string(), 18);

  TinyConfig qwen3_byte;  // untied, MHA, so LoRA can reach lm_head
  qwen3_byte.model_type = "qwen3";
  qwen3_byte.kv_heads = 4;
  qwen3_byte.head_dim = 16;
  make_model(cases / "qwen3_byte", qwen3_byte, "byte", 19);

  // Gemma 2: (1 + w) norms stored as 1 + w, sandwich norms, GeGLU, scaled embeddings, caps
  // small enough to bend (8 on scores, 10 on logits of std ~4), windows of 8 on the even layers
  // (so the 40-token continuation runs far past them); tied, as llama.cpp's Gemma requires.
  TinyConfig gemma2;
  gemma2.model_type = "gemma2";
  gemma2.layers = 4;
  gemma2.head_dim = 16;
  gemma2.tie = true;  // llama.cpp's Gemma always ties the head
  gemma2.extra = {{"query_pre_attn_scalar", 16}, {"sliding_window", 8}, {"attn_logit_softcapping", 8.0},
                  {"final_logit_softcapping", 10.0}, {"hidden_activation", "gelu_pytorch_tanh"}};
  make_model(cases / "gemma2_byte", gemma2, "byte", 24);

  // Gemma 3: q/k norms, 5 local layers (window 8, RoPE theta 10000) and 1 global (theta 1e6,
  // linear scaling 2), tied.
  TinyConfig gemma3;
  gemma3.model_type = "gemma3_text";
  gemma3.layers = 6;
  gemma3.head_dim = 16;
  gemma3.tie = true;
  gemma3.rope_theta = 1000000.0;
  gemma3.rope_scaling = {{"rope_type", "linear"}, {"factor", 2.0}};
  gemma3.extra = {{"query_pre_attn_scalar", 16}, {"sliding_window", 8}, {"sliding_window_pattern", 6},
                  {"rope_local_base_freq", 10000.0}, {"hidden_activation", "gelu_pytorch_tanh"}};
  make_model(cases / "gemma3_byte", gemma3, "byte", 25);

  // Phi-3: fused qkv_proj / gate_up_proj, half the head rotary, longrope with an original context
  // of 16 (llama.cpp's context of 256 and ctune's forwards over the 28-token prompt and beyond
  // both take the long factors; attention factor sqrt(1 + ln 16 / ln 16) = sqrt 2), untied; its
  // window (512) is longer than the context, since llama.cpp's phi3 ignores windows.
  TinyConfig phi3;
  phi3.model_type = "phi3";
  phi3.head_dim = 16;
  phi3.rope_scaling = {{"rope_type", "longrope"},
                       {"short_factor", {1.0, 1.3, 1.9, 2.4}},
                       {"long_factor", {1.0, 2.5, 6.0, 11.0}}};
  phi3.extra = {{"partial_rotary_factor", 0.5}, {"original_max_position_embeddings", 16}, {"sliding_window", 512}};
  make_model(cases / "phi3_byte", phi3, "byte", 27);

  // SmolLM3: 4 layers, the 4th without RoPE (llama.cpp's fixed step), tied.
  TinyConfig smollm3;
  smollm3.model_type = "smollm3";
  smollm3.layers = 4;
  smollm3.head_dim = 16;
  smollm3.tie = true;
  smollm3.rope_theta = 2000000.0;
  smollm3.extra = {{"no_rope_layer_interval", 4}, {"use_sliding_window", false}};
  make_model(cases / "smollm3_byte", smollm3, "byte", 28);

  // Qwen3-MoE: 8 experts of 32, top 2 renormalised (norm_topk_prob, as llama.cpp's qwen3moe
  // always does), q/k norms, untied. Mixtral: 4 experts of 128, top 2, tied.
  TinyConfig qwen3moe;
  qwen3moe.model_type = "qwen3_moe";
  qwen3moe.head_dim = 16;
  qwen3moe.extra = {{"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32}, {"norm_topk_prob", true}};
  make_model(cases / "qwen3moe_byte", qwen3moe, "byte", 30);
  TinyConfig mixtral;
  mixtral.model_type = "mixtral";
  mixtral.tie = true;
  mixtral.extra = {{"num_local_experts", 4}, {"num_experts_per_tok", 2}};
  make_model(cases / "mixtral_byte", mixtral, "byte", 31);

  // Qwen3.5 (llama.cpp's qwen35): Gated DeltaNet layers, value heads reordered in the file, a
  // gated full-attention layer with partial RoPE, (1 + w) norms but the DeltaNet's (tiny_qwen35).
  make_model(cases / "qwen35_byte", tiny_qwen35(), "byte", 34);
  // Qwen3.5-MoE (llama.cpp's qwen35moe): DeltaNet and gated attention layers alternating, each with
  // 8 experts (2 per token, renormalised) and a sigmoid-gated shared expert, untied (tiny_qwen35_moe).
  make_model(cases / "qwen35moe_byte", tiny_qwen35_moe(), "byte", 35);

  make_adapter(cases / "llama_byte", cases / "llama_byte_lora",
               {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}, 21);
  make_adapter(cases / "qwen2_byte", cases / "qwen2_byte_lora", {"q_proj", "k_proj", "v_proj", "o_proj", "lm_head"},
               22, /*rslora=*/true);
  make_adapter(cases / "qwen3_byte", cases / "qwen3_byte_lora", {"all-linear", "lm_head"}, 23);
  make_adapter(cases / "gemma3_byte", cases / "gemma3_byte_lora", {"all-linear"}, 26);
  make_adapter(cases / "phi3_byte", cases / "phi3_byte_lora", {"all-linear", "lm_head"}, 29);
  make_adapter(cases / "qwen3moe_byte", cases / "qwen3moe_byte_lora", {"all-linear", "lm_head"}, 32);  // experts included
  make_adapter(cases / "mixtral_byte", cases / "mixtral_byte_lora", {"q_proj", "v_proj", "w1", "w2", "w3"}, 33);
  // Qwen3.5: every Linear, the DeltaNet's in_proj_qkv/z/b/a and out_proj included (their value-head
  // rows or columns reordered in the file like the weights'); the MoE's experts, shared expert,
  // its gate and the untied head too.
  make_adapter(cases / "qwen35_byte", cases / "qwen35_byte_lora", {"all-linear"}, 36);
  make_adapter(cases / "qwen35moe_byte", cases / "qwen35moe_byte_lora", {"all-linear", "lm_head"}, 37);
}

// Runs `ctune export`, appending its report to the log; throws when it fails.
void run_export(const std::vector<std::string>& args, std::string& log) {
  std::vector<std::string> full = {"export"};
  full.insert(full.end(), args.begin(), args.end());
  full.push_back("--overwrite");
  const auto r = testing::ctune(full);
  std::string line = "ctune";
  for (const auto& a : full) line += " " + a;
  log += line + "\n" + r.out + r.err;
  if (r.status != 0) throw Error("export failed: " + line + ": " + r.err);
}

void export_models(const fs::path& cases, std::string& log) {
  const std::string d = cases.string() + "/";
  for (const char* type : {"f32", "f16", "bf16", "q8_0"})
    run_export({"--model", d + "llama_byte", "--out", d + "llama_byte." + type + ".gguf", "--type", type}, log);
  for (const char* m :
       {"mistral_linear", "llama3_rope", "qwen2_qwen3tok", "llama_spm", "llama2_json", "qwen2_byte", "qwen3_qwen3tok", "qwen3_byte",
        "gemma2_byte", "gemma3_byte", "phi3_byte", "smollm3_byte", "qwen3moe_byte", "mixtral_byte", "qwen35_byte",
        "qwen35moe_byte"})
    run_export({"--model", d + m, "--format", "gguf", "--out", d + m + ".f32.gguf"}, log);
  run_export({"--model", d + "llama_byte", "--adapter", d + "llama_byte_lora", "--out", d + "llama_byte_merged.f32.gguf"}, log);
  run_export({"--model", d + "llama_byte", "--adapter", d + "llama_byte_lora", "--format", "gguf-lora", "--out",
              d + "llama_byte_lora.gguf"}, log);
  run_export({"--model", d + "qwen2_byte", "--adapter", d + "qwen2_byte_lora", "--format", "gguf-lora", "--out",
              d + "qwen2_byte_lora.gguf"}, log);
  run_export({"--model", d + "qwen3_byte", "--adapter", d + "qwen3_byte_lora", "--format", "gguf-lora", "--out",
              d + "qwen3_byte_lora.gguf"}, log);
  run_export({"--model", d + "gemma3_byte", "--adapter", d + "gemma3_byte_lora", "--format", "gguf-lora", "--out",
              d + "gemma3_byte_lora.gguf"}, log);
  run_export({"--model", d + "phi3_byte", "--adapter", d + "phi3_byte_lora", "--format", "gguf-lora", "--out",
              d + "phi3_byte_lora.gguf"}, log);
  for (const char* m : {"qwen3moe_byte", "mixtral_byte", "qwen35_byte", "qwen35moe_byte"}) {
    run_export({"--model", d + m, "--adapter", d + m + "_lora", "--format", "gguf-lora", "--out", d + m + "_lora.gguf"}, log);
  }
  run_export({"--model", d + "mixtral_byte", "--adapter", d + "mixtral_byte_lora", "--out", d + "mixtral_byte_merged.f32.gguf"},
             log);
}

Json jobs(const fs::path& cases) {
  Json list = Json::array();
  for (const ConformanceCase& c : conformance_cases()) {
    auto tokenizer = tok::load_tokenizer(cases / c.model);
    Json job = {{"name", c.name},
                {"model", (cases / c.gguf).string()},
                {"lora", c.gguf_lora.empty() ? Json() : Json((cases / c.gguf_lora).string())},
                {"prompt", tokenizer->encode(kPrompt, true)},
                {"generate", kGenerate},
                {"top", tokenizer->vocab_size() > 4096 ? kTopLargeVocab : 0},
                {"texts", c.tokenization ? Json(tokenization_texts()) : Json::array()}};
    list.push_back(job);
  }
  return {{"cases", list}};
}

}  // namespace

int prepare_conformance() {
  try {
    const fs::path cases = fresh_dir("cases");
    make_models(cases);
    std::string log;
    export_models(cases, log);
    io::write_file_atomic(cases / "export.log", log);
    std::cout << log;
    io::write_file_atomic(cases / "jobs.json", jobs(cases).dump());
    const std::string cmd = std::string("'") + CTUNE_NODE + "' '" + (source_dir() / "llama_cpp_eval.mjs").string() +
                            "' '" + llama_cpp_npm().string() + "' '" + (cases / "jobs.json").string() + "' '" +
                            (cases / "results.json").string() + "'";
    const int status = std::system(cmd.c_str());
    if (status != 0) {
      std::cerr << "llama_cpp_eval.mjs failed (status " << status << ")\n";
      return 1;
    }
    std::cout << "llama.cpp results in " << (cases / "results.json").string() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "prepare: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace ctune::exporter::test
