// Hyperparameter keys every architecture has; a family's own keys and refusals are its GgufForm
// hooks (model/family.h, model/families/<family>.cpp). Integers are written as u32 and floats as
// f32, the types llama.cpp's loader reads them as; config_from_gguf accepts any integer or
// float type.
#include "export/gguf_metadata.h"

#include "core/error.h"
#include "core/log.h"
#include "export/gguf_names.h"
#include "model/families/gguf_keys.h"
#include "model/family.h"
#include "model/rope.h"

namespace ctune::exporter {

using io::GgufValue;

void check_exportable(const model::ModelConfig& c) {
  const model::GgufForm& form = gguf_form(c);
  if (form.check) form.check(c);
}

namespace {
// What the file cannot carry but llama.cpp runs anyway: windows its architecture drops or
// ignores (every one but Gemma's).
void warn_differences(const model::ModelConfig& c, const model::GgufForm& form) {
  const auto window = c.arch.sliding_window();
  if (!window || form.windows == model::GgufForm::Windows::carried) return;
  spdlog::warn("sliding_window {} {}: llama.cpp's {} attends over the whole context, so its outputs agree with ctune's "
               "for contexts up to the window only",
               *window, form.windows == model::GgufForm::Windows::ignored ? "is written but not read" : "is not written",
               form.architecture);
}

// The keys of every architecture: shape, norm, RoPE and its linear or longrope scaling, and
// the expert counts of a mixture (what convert_hf_to_gguf writes for every one).
void write_shared_keys(model::GgufKeyWriter& k, const model::ModelConfig& c) {
  k.u32("context_length", c.max_position_embeddings);
  k.u32("embedding_length", c.hidden_size);
  k.u32("block_count", c.num_hidden_layers);
  k.u32("feed_forward_length", c.intermediate_size);
  k.u32("attention.head_count", c.num_attention_heads);
  k.u32("attention.head_count_kv", c.num_key_value_heads);
  k.u32("attention.key_length", c.head_dim);
  k.u32("attention.value_length", c.head_dim);
  k.f32("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  k.u32("rope.dimension_count", c.rope.rotary_dim(c.head_dim));
  k.f32("rope.freq_base", c.rope.theta);
  k.u32("vocab_size", c.vocab_size);
  if (c.rope.type == "linear") {
    k.string("rope.scaling.type", "linear");
    k.f32("rope.scaling.factor", c.rope.factor);
  }
  if (c.rope.type == "longrope") {  // the factors themselves are tensors (longrope_factor_tensors)
    k.u32("rope.scaling.original_context_length", c.rope.original_max_position);
    k.f32("rope.scaling.attn_factor", c.rope.attention_factor);
  }
  if (c.arch.moe.experts > 0) {
    k.u32("expert_count", c.arch.moe.experts);
    k.u32("expert_used_count", c.arch.moe.top_k);
  }
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
  const model::GgufForm& form = gguf_form(c);
  warn_differences(c, form);
  w.set("general.architecture", GgufValue::string(form.architecture));
  w.set("general.type", GgufValue::string("model"));
  w.set("general.name", GgufValue::string(name));
  w.set("general.file_type", GgufValue::u32(gguf_file_type(weight_type)));
  if (weight_type == io::GgmlType::Q8_0) w.set("general.quantization_version", GgufValue::u32(2));
  model::GgufKeyWriter keys(w, form.architecture);
  write_shared_keys(keys, c);
  if (form.write_keys) form.write_keys(keys, c);
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

namespace {
// The family a file's general.architecture and expert_count name; UnsupportedError naming
// what ctune reads when none does.
const model::Family& family_of_file(const std::string& arch, std::int64_t experts, const std::string& where) {
  const model::Family* family = model::family_for_gguf_architecture(arch, experts > 0);
  if (family) return *family;
  if (model::family_for_gguf_architecture(arch, experts == 0))
    throw UnsupportedError(where + ": " + arch + ".expert_count: " + std::to_string(experts) + " (ctune reads " + arch +
                           " files " + (experts > 0 ? "without" : "with") + " experts)");
  std::string known;
  for (const model::Family* f : model::all_families())
    if (!f->gguf.architecture.empty() && known.find(f->gguf.architecture) == std::string::npos)
      known += (known.empty() ? "" : ", ") + f->gguf.architecture;
  throw UnsupportedError(where + ": general.architecture \"" + arch + "\" (ctune reads " + known + ")");
}

// The keys every architecture has, and what the tensors imply (vocab, tied head, biases, q/k norms).
void read_shared_keys(const io::GgufHeader& h, const model::GgufKeys& k, const std::string& where, model::ModelConfig& c) {
  c.hidden_size = k.integer("embedding_length");
  c.num_hidden_layers = k.integer("block_count");
  c.intermediate_size = k.integer("feed_forward_length");
  c.num_attention_heads = k.integer("attention.head_count");
  c.num_key_value_heads = k.integer_or("attention.head_count_kv", c.num_attention_heads);
  if (c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads)
    throw FormatError(where + ": head counts " + std::to_string(c.num_attention_heads) + "/" +
                      std::to_string(c.num_key_value_heads) + " are not valid");
  c.head_dim = k.integer_or("attention.key_length", c.hidden_size / c.num_attention_heads);
  c.max_position_embeddings = k.integer_or("context_length", 2048);
  c.rms_norm_eps = k.number("attention.layer_norm_rms_epsilon");
  c.rope.theta = k.number_or("rope.freq_base", 10000.0);
  if (const GgufValue* type = k.find("rope.scaling.type")) {
    const std::string t = type->as_string(k.at("rope.scaling.type"));
    if (t == "linear") {
      c.rope.type = "linear";
      c.rope.factor = k.number_or("rope.scaling.factor", 1.0);
    } else if (t != "none") {
      throw UnsupportedError(k.at("rope.scaling.type") + ": \"" + t + "\" (ctune reads none and linear)");
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
}

// What llama.cpp's MoE layers fix: every layer sparse, weights renormalised; each expert
// feed_forward_length wide unless the family's hook reads its own width.
void read_shared_experts(const model::GgufKeys& k, std::int64_t experts, model::ModelConfig& c) {
  model::MoeArchitecture& m = c.arch.moe;
  m.experts = experts;
  m.top_k = k.integer("expert_used_count");
  m.intermediate = c.intermediate_size;
  m.normalize_top_k = true;
  m.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), true);
}

void check_mixture(const model::MoeArchitecture& m, const std::string& where) {
  if (m.experts > 16384 || m.top_k < 1 || m.top_k > m.experts || m.intermediate <= 0)
    throw FormatError(where + ": " + std::to_string(m.top_k) + " of " + std::to_string(m.experts) + " experts of size " +
                      std::to_string(m.intermediate) + " is not a valid mixture");
}
}  // namespace

model::ModelConfig config_from_gguf(const io::GgufHeader& h, const std::string& where) {
  const std::string arch = h.require("general.architecture", where).as_string(where + ": general.architecture");
  const model::GgufKeys keys(h, arch, where);
  const std::int64_t experts = keys.integer_or("expert_count", 0);
  const model::Family& family = family_of_file(arch, experts, where);

  model::ModelConfig c;
  c.model_type = family.name;
  c.arch.names = family.names;
  read_shared_keys(h, keys, where, c);
  if (experts > 0) read_shared_experts(keys, experts, c);
  if (family.gguf.read_keys) family.gguf.read_keys(keys, c);
  if (experts > 0) check_mixture(c.arch.moe, where);
  return c;
}

}  // namespace ctune::exporter
