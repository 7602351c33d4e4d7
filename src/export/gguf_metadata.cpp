// Hyperparameter keys. Integers are written as u32 and floats as f32, the types llama.cpp's
// loader reads them as; config_from_gguf accepts any integer or float type.
#include "export/gguf_metadata.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "export/gguf_names.h"
#include "model/family.h"
#include "model/rope.h"

namespace ctune::exporter {

using io::GgufValue;

namespace {

// The queries' scale llama.cpp's gemma2/gemma3 use: derived from the shape, not read (its 27B
// models, 46 and 62 layers, scale by hidden / heads; the others by head_dim).
double llama_cpp_gemma_scale(const model::ModelConfig& c, const std::string& arch) {
  const bool big = c.num_hidden_layers == (arch == "gemma2" ? 46 : 62);
  return 1.0 / std::sqrt(static_cast<double>(big ? c.hidden_size / c.num_attention_heads : c.head_dim));
}

// llama.cpp's fixed layer pattern: layer i slides when i % pattern < pattern - 1 (gemma2: 2,
// gemma3: 6), all with one window.
std::vector<std::int64_t> llama_cpp_gemma_windows(std::int64_t layers, std::int64_t pattern, std::int64_t window) {
  std::vector<std::int64_t> w(static_cast<std::size_t>(layers), 0);
  for (std::int64_t i = 0; i < layers; ++i)
    if (i % pattern < pattern - 1) w[static_cast<std::size_t>(i)] = window;
  return w;
}

std::int64_t gemma_pattern(const std::string& arch) { return arch == "gemma2" ? 2 : 6; }

void check_gemma_exportable(const model::ModelConfig& c, const std::string& arch) {
  const std::string what = "model_type " + c.model_type + ": ";
  if (c.arch.qkv_bias || c.arch.o_bias) throw UnsupportedError(what + "attention_bias has no " + arch + " GGUF form");
  if (!c.tie_word_embeddings)  // its loader never reads output.weight
    throw UnsupportedError(what + "an untied lm_head has no " + arch + " GGUF form (llama.cpp's Gemma always ties it)");
  const double expected = llama_cpp_gemma_scale(c, arch);
  if (std::abs(c.attention_scale() - expected) > 1e-6 * expected) {
    throw UnsupportedError(what + "query_pre_attn_scalar " + std::to_string(*c.arch.query_pre_attn_scalar) +
                           " has no " + arch + " GGUF form (llama.cpp derives the scale from the shape: expected " +
                           std::to_string(1.0 / (expected * expected)) + ")");
  }
  const auto window = c.arch.sliding_window();
  const std::int64_t pattern = gemma_pattern(arch);
  if (!window || c.arch.layer_windows != llama_cpp_gemma_windows(c.num_hidden_layers, pattern, *window)) {
    throw UnsupportedError(what + "its sliding layers have no " + arch + " GGUF form (llama.cpp windows every layer but each " +
                           std::to_string(pattern) + "th, all with one sliding_window)");
  }
  if (arch == "gemma2" && (c.arch.attn_softcap <= 0 || c.arch.final_softcap <= 0))
    throw UnsupportedError(what + "llama.cpp's gemma2 always soft-caps scores and logits (a null cap has no GGUF form)");
  if (arch == "gemma3") {
    if (c.arch.attn_softcap > 0) throw UnsupportedError(what + "attention soft-caps have no gemma3 GGUF form");
    const auto& local = c.arch.local_rope;
    if (!local || local->type != "default" || local->theta != 10000.0)
      throw UnsupportedError(what + "llama.cpp's gemma3 fixes the local layers' RoPE at theta 10000, unscaled");
  }
}

// llama.cpp's phi3: fused qkv of hidden rows for the queries (so heads x head_dim = hidden), NEOX
// RoPE over rope.dimension_count dimensions, longrope factors as two tensors. Its loader reads
// sliding_window but disables Phi windows (llama.cpp PR 13676), so the key is written, as
// convert_hf_to_gguf writes it, and outputs agree up to the window.
void check_phi3_exportable(const model::ModelConfig& c) {
  const std::string what = "model_type " + c.model_type + ": ";
  if (c.num_attention_heads * c.head_dim != c.hidden_size)
    throw UnsupportedError(what + "heads x head_dim (" + std::to_string(c.num_attention_heads * c.head_dim) +
                           ") must equal hidden_size (" + std::to_string(c.hidden_size) + ") for llama.cpp's phi3");
  if (c.rope.type != "default" && c.rope.type != "longrope")
    throw UnsupportedError(what + c.rope.type + " rope scaling has no phi3 GGUF form (expected none or longrope)");
  if (c.arch.qkv_bias || c.arch.o_bias || c.arch.mlp_bias)
    throw UnsupportedError(what + "projection biases have no phi3 GGUF form");
}

// llama.cpp's smollm3 fixes the NoPE layers at every 4th (layer i rotates when (i + 1) % 4 != 0)
// and loads no o_proj or MLP biases and no rope_freqs.
std::vector<bool> llama_cpp_smollm3_rope_layers(std::int64_t layers) {
  std::vector<bool> rope(static_cast<std::size_t>(layers));
  for (std::int64_t i = 0; i < layers; ++i) rope[static_cast<std::size_t>(i)] = (i + 1) % 4 != 0;
  return rope;
}

void check_smollm3_exportable(const model::ModelConfig& c) {
  const std::string what = "model_type " + c.model_type + ": ";
  std::vector<bool> rope;
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) rope.push_back(c.arch.rope(i));
  if (rope != llama_cpp_smollm3_rope_layers(c.num_hidden_layers))
    throw UnsupportedError(what + "no_rope_layers has no smollm3 GGUF form (llama.cpp's smollm3 skips RoPE on every 4th layer, "
                           "no_rope_layer_interval 4)");
  if (c.rope.type != "default" && c.rope.type != "linear")
    throw UnsupportedError(what + c.rope.type + " rope scaling has no smollm3 GGUF form (expected none or linear)");
  if (c.arch.o_bias || c.arch.mlp_bias) throw UnsupportedError(what + "o_proj/MLP biases have no smollm3 GGUF form");
}

// llama.cpp's MoE layers (llama for Mixtral, qwen3moe): every layer sparse, softmax routing
// over all experts, the chosen k weights always renormalised (build_moe_ffn with norm_w).
void check_moe_exportable(const model::ModelConfig& c, const std::string& arch) {
  const model::MoeArchitecture& m = c.arch.moe;
  if (m.experts == 0) return;
  const std::string what = "model_type " + c.model_type + ": ";
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
    if (!m.sparse(i))
      throw UnsupportedError(what + "dense layer " + std::to_string(i) + " (mlp_only_layers / decoder_sparse_step) has no " + arch +
                             " GGUF form (llama.cpp's " + arch + " makes every layer sparse)");
  if (!m.normalize_top_k)
    throw UnsupportedError(what + "norm_topk_prob false has no " + arch +
                           " GGUF form (llama.cpp renormalises the chosen experts' weights)");
}

}  // namespace

void check_exportable(const model::ModelConfig& c) {
  const std::string arch = gguf_architecture(c);
  check_moe_exportable(c, arch);
  if (arch == "phi3") return check_phi3_exportable(c);
  if (arch == "smollm3") check_smollm3_exportable(c);
  if (arch == "gemma2" || arch == "gemma3") {
    check_gemma_exportable(c, arch);
    if (c.rope.type == "llama3") throw UnsupportedError("model_type " + c.model_type + ": llama3 rope scaling has no " + arch + " GGUF form");
    return;
  }
  if (arch == "qwen2") {
    const std::string what = "model_type qwen2: ";
    if (c.rope.type == "llama3")
      throw UnsupportedError(what + "llama3 rope scaling has no qwen2 GGUF form (llama.cpp reads rope_freqs for llama only)");
    if (c.arch.o_bias || c.arch.mlp_bias) throw UnsupportedError(what + "o_proj/MLP biases have no qwen2 GGUF form");
    if (c.num_attention_heads * c.head_dim != c.hidden_size)
      throw UnsupportedError(what + "heads x head_dim (" + std::to_string(c.num_attention_heads * c.head_dim) +
                             ") must equal hidden_size (" + std::to_string(c.hidden_size) + ") for llama.cpp's qwen2");
  }
  if (arch == "qwen3" || arch == "qwen3moe") {
    const std::string what = "model_type " + c.model_type + ": ";
    if (c.arch.qkv_bias || c.arch.o_bias || c.arch.mlp_bias)
      throw UnsupportedError(what + "attention_bias has no " + arch + " GGUF form (llama.cpp's " + arch + " has no projection biases)");
    if (c.rope.type == "llama3")
      throw UnsupportedError(what + "llama3 rope scaling has no " + arch + " GGUF form (llama.cpp reads rope_freqs for llama only)");
  }
}

namespace {
// What the file cannot carry but llama.cpp runs anyway: windows outside Gemma.
void warn_differences(const model::ModelConfig& c, const std::string& arch) {
  const auto window = c.arch.sliding_window();
  if (!window || arch == "gemma2" || arch == "gemma3") return;
  spdlog::warn("sliding_window {} {}: llama.cpp's {} attends over the whole context, so its outputs agree with ctune's "
               "for contexts up to the window only", *window, arch == "phi3" ? "is written but not read" : "is not written",
               arch);
}
}  // namespace

std::uint32_t gguf_file_type(io::GgmlType type) {
  switch (type) {
    case io::GgmlType::F16: return 1;
    case io::GgmlType::Q8_0: return 7;
    case io::GgmlType::BF16: return 32;
    default: return 0;  // all F32
  }
}

void write_model_metadata(io::GgufWriter& w, const model::ModelConfig& c, const std::string& name,
                          io::GgmlType weight_type) {
  check_exportable(c);
  const std::string a = gguf_architecture(c);
  warn_differences(c, a);
  auto u32 = [](std::int64_t v) { return GgufValue::u32(static_cast<std::uint32_t>(v)); };
  w.set("general.architecture", GgufValue::string(a));
  w.set("general.type", GgufValue::string("model"));
  w.set("general.name", GgufValue::string(name));
  w.set("general.file_type", GgufValue::u32(gguf_file_type(weight_type)));
  if (weight_type == io::GgmlType::Q8_0) w.set("general.quantization_version", GgufValue::u32(2));
  w.set(a + ".context_length", u32(c.max_position_embeddings));
  w.set(a + ".embedding_length", u32(c.hidden_size));
  w.set(a + ".block_count", u32(c.num_hidden_layers));
  w.set(a + ".feed_forward_length", u32(c.intermediate_size));
  w.set(a + ".attention.head_count", u32(c.num_attention_heads));
  w.set(a + ".attention.head_count_kv", u32(c.num_key_value_heads));
  w.set(a + ".attention.key_length", u32(c.head_dim));
  w.set(a + ".attention.value_length", u32(c.head_dim));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::f32(static_cast<float>(c.rms_norm_eps)));
  w.set(a + ".rope.dimension_count", u32(c.rope.rotary_dim(c.head_dim)));
  w.set(a + ".rope.freq_base", GgufValue::f32(static_cast<float>(c.rope.theta)));
  w.set(a + ".vocab_size", u32(c.vocab_size));
  if (c.rope.type == "linear") {
    w.set(a + ".rope.scaling.type", GgufValue::string("linear"));
    w.set(a + ".rope.scaling.factor", GgufValue::f32(static_cast<float>(c.rope.factor)));
  }
  if (c.rope.type == "longrope") {  // the factors themselves are tensors (longrope_factor_tensors)
    w.set(a + ".rope.scaling.original_context_length", u32(c.rope.original_max_position));
    w.set(a + ".rope.scaling.attn_factor", GgufValue::f32(static_cast<float>(c.rope.attention_factor)));
  }
  if (c.arch.moe.experts > 0) {  // what convert_hf_to_gguf writes for Mixtral and Qwen3-MoE
    w.set(a + ".expert_count", u32(c.arch.moe.experts));
    w.set(a + ".expert_used_count", u32(c.arch.moe.top_k));
    if (a != "llama") w.set(a + ".expert_feed_forward_length", u32(c.arch.moe.intermediate));
  }
  if (a == "phi3") w.set(a + ".attention.sliding_window", u32(c.arch.sliding_window().value_or(0)));
  if (a == "gemma2" || a == "gemma3") {
    w.set(a + ".attention.sliding_window", u32(*c.arch.sliding_window()));
    if (c.arch.attn_softcap > 0) w.set(a + ".attn_logit_softcapping", GgufValue::f32(static_cast<float>(c.arch.attn_softcap)));
    if (c.arch.final_softcap > 0) w.set(a + ".final_logit_softcapping", GgufValue::f32(static_cast<float>(c.arch.final_softcap)));
  }
}

std::vector<std::pair<std::string, at::Tensor>> longrope_factor_tensors(const model::RopeConfig& rope) {
  auto f32 = [](const std::vector<double>& v) { return at::tensor(v, at::kDouble).to(at::kFloat).contiguous(); };
  return {{kRopeFactorsLongName, f32(rope.long_factor)}, {kRopeFactorsShortName, f32(rope.short_factor)}};
}

at::Tensor llama3_rope_factors(const model::ModelConfig& config) {
  model::ModelConfig base = config;
  base.rope.type = "default";
  return (model::rope_inv_freq(base) / model::rope_inv_freq(config)).to(at::kFloat).contiguous();
}

model::ModelConfig config_from_gguf(const io::GgufHeader& h, const std::string& where) {
  auto key = [&](const std::string& k) -> const GgufValue& { return h.require(k, where); };
  auto at = [&](const std::string& k) { return where + ": " + k; };
  const std::string arch = key("general.architecture").as_string(at("general.architecture"));
  const GgufValue* expert_count = h.find(arch + ".expert_count");
  const std::int64_t experts = expert_count ? expert_count->as_int(at(arch + ".expert_count")) : 0;
  const model::Family* family = model::family_for_gguf_architecture(arch, experts > 0);
  if (!family && model::family_for_gguf_architecture(arch, experts == 0))
    throw UnsupportedError(at(arch + ".expert_count") + ": " + std::to_string(experts) + " (ctune reads " + arch + " files " +
                           (experts > 0 ? "without" : "with") + " experts)");
  if (!family) {
    std::string known;
    for (const model::Family* f : model::all_families())
      if (!f->gguf.architecture.empty() && known.find(f->gguf.architecture) == std::string::npos)
        known += (known.empty() ? "" : ", ") + f->gguf.architecture;
    throw UnsupportedError(where + ": general.architecture \"" + arch + "\" (ctune reads " + known + ")");
  }
  auto integer = [&](const std::string& k) { return key(arch + "." + k).as_int(at(arch + "." + k)); };
  auto optional_int = [&](const std::string& k, std::int64_t fallback) {
    const GgufValue* v = h.find(arch + "." + k);
    return v ? v->as_int(at(arch + "." + k)) : fallback;
  };
  auto optional_float = [&](const std::string& k, double fallback) {
    const GgufValue* v = h.find(arch + "." + k);
    return v ? v->as_float(at(arch + "." + k)) : fallback;
  };

  model::ModelConfig c;
  c.model_type = family->name;
  c.hidden_size = integer("embedding_length");
  c.num_hidden_layers = integer("block_count");
  c.intermediate_size = integer("feed_forward_length");
  c.num_attention_heads = integer("attention.head_count");
  c.num_key_value_heads = optional_int("attention.head_count_kv", c.num_attention_heads);
  if (c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads)
    throw FormatError(where + ": head counts " + std::to_string(c.num_attention_heads) + "/" +
                      std::to_string(c.num_key_value_heads) + " are not valid");
  c.head_dim = optional_int("attention.key_length", c.hidden_size / c.num_attention_heads);
  c.max_position_embeddings = optional_int("context_length", 2048);
  c.rms_norm_eps = key(arch + ".attention.layer_norm_rms_epsilon").as_float(at(arch + ".attention.layer_norm_rms_epsilon"));
  c.rope.theta = optional_float("rope.freq_base", 10000.0);
  if (const GgufValue* type = h.find(arch + ".rope.scaling.type")) {
    const std::string t = type->as_string(at(arch + ".rope.scaling.type"));
    if (t == "linear") {
      c.rope.type = "linear";
      c.rope.factor = optional_float("rope.scaling.factor", 1.0);
    } else if (t != "none") {
      throw UnsupportedError(at(arch + ".rope.scaling.type") + ": \"" + t + "\" (ctune reads none and linear)");
    }
  }
  const io::GgufTensorInfo* embed = h.find_tensor("token_embd.weight");
  if (!embed || embed->ne.size() != 2) throw FormatError(where + ": missing 2-D tensor token_embd.weight");
  c.vocab_size = embed->ne[1];
  c.tie_word_embeddings = h.find_tensor("output.weight") == nullptr;
  c.arch.qkv_bias = h.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.arch.o_bias = h.find_tensor("blk.0.attn_output.bias") != nullptr;
  c.arch.mlp_bias = h.find_tensor("blk.0.ffn_gate.bias") != nullptr;
  c.arch.qk_norm = h.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  if (arch == "phi3") {
    c.arch.fused_qkv = c.arch.fused_gate_up = true;
    const std::int64_t rotary = optional_int("rope.dimension_count", c.head_dim);
    if (rotary <= 0 || rotary > c.head_dim || rotary % 2)
      throw FormatError(at(arch + ".rope.dimension_count") + ": " + std::to_string(rotary) + " (expected an even count up to " +
                        std::to_string(c.head_dim) + ")");
    c.rope.partial_rotary_factor = static_cast<double>(rotary) / static_cast<double>(c.head_dim);
    if (const std::int64_t window = optional_int("attention.sliding_window", 0); window > 0)
      c.arch.layer_windows.assign(static_cast<std::size_t>(c.num_hidden_layers), window);
    if (h.find_tensor(kRopeFactorsLongName)) {  // the factors are read with the tensors (load_gguf_model)
      c.rope.type = "longrope";
      c.rope.original_max_position = optional_int("rope.scaling.original_context_length", c.max_position_embeddings);
      c.rope.attention_factor = optional_float("rope.scaling.attn_factor", 1.0);
    }
  }
  if (experts > 0) {  // what llama.cpp's MoE layers fix: every layer sparse, weights renormalised
    model::MoeArchitecture& m = c.arch.moe;
    m.experts = experts;
    m.top_k = integer("expert_used_count");
    m.intermediate = arch == "llama" ? c.intermediate_size : integer("expert_feed_forward_length");
    if (m.experts > 16384 || m.top_k < 1 || m.top_k > m.experts || m.intermediate <= 0)
      throw FormatError(where + ": " + std::to_string(m.top_k) + " of " + std::to_string(m.experts) + " experts of size " +
                        std::to_string(m.intermediate) + " is not a valid mixture");
    m.normalize_top_k = true;
    m.mixtral_names = family->name == "mixtral";  // block_sparse_moe.experts.N.w1/w2/w3
    m.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), true);
  }
  if (arch == "smollm3") c.arch.rope_layers = llama_cpp_smollm3_rope_layers(c.num_hidden_layers);
  if (arch == "gemma2" || arch == "gemma3") {  // what llama.cpp's gemma2/gemma3 fix or default
    c.arch.activation = model::Activation::gelu_tanh;
    c.arch.norm_offset = c.arch.sandwich_norms = c.arch.embed_scale = true;
    const double scale = llama_cpp_gemma_scale(c, arch);
    c.arch.query_pre_attn_scalar = 1.0 / (scale * scale);
    const bool gemma2 = arch == "gemma2";
    c.arch.attn_softcap = gemma2 ? optional_float("attn_logit_softcapping", 50.0) : 0.0;
    c.arch.final_softcap = optional_float("final_logit_softcapping", gemma2 ? 30.0 : 0.0);
    const std::int64_t window = optional_int("attention.sliding_window", gemma2 ? 4096 : 0);
    if (window > 0) {
      c.arch.layer_windows = llama_cpp_gemma_windows(c.num_hidden_layers, gemma_pattern(arch), window);
      if (!gemma2) {
        c.arch.local_rope = model::RopeConfig{};  // theta 10000, unscaled
        for (const auto w : c.arch.layer_windows) c.arch.local_rope_layers.push_back(w > 0);
      }
    }
  }
  return c;
}

}  // namespace ctune::exporter
