// Qwen3.5 / 3.6 / 3.8 dense (modeling_qwen3_5.py, Qwen3_5TextConfig): a hybrid of two layer
// kinds by layer_types (default: every full_attention_interval-th layer (4) full attention, the
// rest linear attention), both followed by a SwiGLU MLP:
//   - "linear_attention": a Gated DeltaNet (model/gated_deltanet.h) sized by linear_num_key_heads,
//     linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim;
//   - "full_attention": Qwen3's attention (q/k norms over head_dim) with a per-head output gate
//     (attn_output_gate, true when absent: q_proj emits query and gate per head;
//     o_proj(attn * sigmoid(gate))) and partial rotary
//     (partial_rotary_factor, 0.25 when absent, in rope_parameters or at the top level).
// Every RMSNorm scales by (1 + w) in fp32 (Qwen3_5RMSNorm), the q/k norms too; the DeltaNet's
// own gated norm scales by w. head_dim 256 and an untied head by default.
// rope_parameters' mrope_section / mrope_interleaved place the temporal, height and width
// positions of image tokens; for text all three are the token's position, so multimodal RoPE
// is ordinary RoPE and the keys are accepted and kept.
// `qwen3_5` (Qwen3_5ForConditionalGeneration, the layout released checkpoints use) is read as
// its text model: text_config, tensors under model.language_model.; the vision tower
// (model.visual.) and the multi-token-prediction head (mtp.) are not loaded.
// The MoE variant (`qwen3_5_moe_text`, wrapper `qwen3_5_moe`; modeling_qwen3_5_moe.py,
// Qwen3_5MoeTextConfig) has the same two mixers; every layer's MLP is sparse: a softmax router
// over num_experts (256), num_experts_per_tok (8) chosen and always renormalised, experts of
// moe_intermediate_size (512), and a shared expert of shared_expert_intermediate_size (512)
// scaled by sigmoid(shared_expert_gate x). It has no intermediate_size.
// Qwen3-Next (`qwen3_next`; modeling_qwen3_next.py, Qwen3NextConfig) is the same two mixers and
// norms (attention always gated: an attn_output_gate false is refused) with Qwen3-MoE's MLP
// choice: by decoder_sparse_step (1) and mlp_only_layers ([]) a layer's MLP is the sparse block
// (num_experts 512, num_experts_per_tok 10, moe_intermediate_size 512, renormalised only with
// norm_topk_prob (true), the sigmoid-gated shared expert of shared_expert_intermediate_size 512)
// or a dense SwiGLU of intermediate_size (5632). Its checkpoints store the DeltaNet's input
// projections fused, rows grouped by key head (next_fused_tensors); the loader splits them into
// the block's in_proj_qkv / in_proj_z / in_proj_b / in_proj_a and the writer fuses them back.
// use_sliding_window / sliding_window are read by no Qwen3-Next module and are ignored as there.
// GGUF: llama.cpp's qwen35 (src/models/qwen35.cpp, convert_hf_to_gguf's Qwen3_5TextModel),
// docs/formats.md#qwen35-dense-qwen35; the MoE variant as its qwen35moe (src/models/qwen35moe.cpp,
// Qwen3_5MoeTextModel): the same layers and keys, with Qwen2-MoE's routed and shared experts,
// docs/formats.md#qwen35-moe-qwen35moe; none yet for Qwen3-Next.
#include <algorithm>
#include <utility>

#include "core/error.h"
#include "model/config.h"
#include "model/families/families.h"
#include "model/families/gguf_keys.h"

namespace ctune::model::families {

namespace {

// layer_types as Qwen3_5TextConfig reads it: given, or derived from full_attention_interval.
std::vector<bool> linear_layers(const Json& j, const std::string& where, std::int64_t layers) {
  const auto it = j.find("layer_types");
  std::vector<bool> linear;
  if (it == j.end() || it->is_null()) {
    const std::int64_t interval = json_int(j, "full_attention_interval", where).value_or(4);
    if (interval <= 0) throw ConfigError(where + ": \"full_attention_interval\" must be positive, found " + std::to_string(interval));
    for (std::int64_t i = 0; i < layers; ++i) linear.push_back((i + 1) % interval != 0);
    return linear;
  }
  if (!it->is_array() || static_cast<std::int64_t>(it->size()) != layers) {
    throw ConfigError(where + ": \"layer_types\" must list one entry per layer (" + std::to_string(layers) + "), found " +
                      (it->is_array() ? std::to_string(it->size()) + " entries" : json_type_name(*it)));
  }
  for (const Json& t : *it) {
    if (t != "linear_attention" && t != "full_attention") {
      throw UnsupportedError(where + ": layer_types entry " + t.dump() +
                             " is not supported (expected linear_attention or full_attention)");
    }
    linear.push_back(t == "linear_attention");
  }
  return linear;
}

std::int64_t positive(const Json& j, const char* key, const std::string& where, std::int64_t fallback) {
  const std::int64_t v = json_int(j, key, where).value_or(fallback);
  if (v <= 0 || v > 65536) throw ConfigError(where + ": \"" + key + "\" must be in 1..65536, found " + std::to_string(v));
  return v;
}

void read_linear_attention(const Json& j, const std::string& where, ModelConfig& c) {
  LinearAttention& l = c.arch.linear;
  l.key_heads = positive(j, "linear_num_key_heads", where, 16);
  l.value_heads = positive(j, "linear_num_value_heads", where, 32);
  l.key_dim = positive(j, "linear_key_head_dim", where, 128);
  l.value_dim = positive(j, "linear_value_head_dim", where, 128);
  l.conv_kernel = positive(j, "linear_conv_kernel_dim", where, 4);
  if (l.value_heads % l.key_heads != 0) {
    throw ConfigError(where + ": linear_num_value_heads (" + std::to_string(l.value_heads) +
                      ") must be a multiple of linear_num_key_heads (" + std::to_string(l.key_heads) + ")");
  }
  l.layers = linear_layers(j, where, c.num_hidden_layers);
}

// partial_rotary_factor: rope_parameters' (transformers v5), else the top level's, else 0.25.
void read_partial_rotary(const Json& j, const std::string& where, ModelConfig& c) {
  std::optional<double> factor;
  if (const auto it = j.find("rope_parameters"); it != j.end() && it->is_object())
    factor = json_number(*it, "partial_rotary_factor", where + ": rope_parameters");
  if (!factor) factor = json_number(j, "partial_rotary_factor", where);
  set_partial_rotary(c, factor.value_or(0.25), where);
}

void parse_text(const Json& j, const std::string& where, ModelConfig& c) {
  parse_llama_keys(j, where, c);  // hidden_act; attention_bias puts biases on q/k/v/o
  c.arch.mlp_bias = false;         // Qwen3_5MLP has no biases and no mlp_bias key
  c.arch.qk_norm = true;
  c.arch.norm_offset = true;
  c.arch.attn_output_gate = json_bool(j, "attn_output_gate", where).value_or(true);  // released configs: true
  read_partial_rotary(j, where, c);
  read_linear_attention(j, where, c);
  if (const auto d = json_number(j, "attention_dropout", where); d && *d != 0.0)
    throw UnsupportedError(where + ": attention_dropout " + std::to_string(*d) + " is not supported (expected 0.0)");
}

void parse_moe(const Json& j, const std::string& where, ModelConfig& c) {
  parse_text(j, where, c);
  MoeArchitecture& m = c.arch.moe;
  m.intermediate = positive(j, "moe_intermediate_size", where, 512);
  m.shared_intermediate = positive(j, "shared_expert_intermediate_size", where, 512);
  m.normalize_top_k = true;  // Qwen3_5MoeTopKRouter renormalises whatever norm_topk_prob says
  parse_moe_keys(j, where, "num_experts", 256, 8, c);
  if (m.experts == 0) throw ConfigError(where + ": \"num_experts\" must be positive for " + c.model_type + ", found 0");
}

void parse_next(const Json& j, const std::string& where, ModelConfig& c) {
  parse_text(j, where, c);
  if (!c.arch.attn_output_gate)
    throw UnsupportedError(where + ": attn_output_gate false is not supported for qwen3_next (expected true or absent: "
                           "Qwen3NextAttention always gates its output)");
  MoeArchitecture& m = c.arch.moe;
  m.intermediate = positive(j, "moe_intermediate_size", where, 512);
  m.normalize_top_k = json_bool(j, "norm_topk_prob", where).value_or(true);
  m.sparse_layers = read_sparse_layers(j, where, c.num_hidden_layers);
  parse_moe_keys(j, where, "num_experts", 512, 10, c);
  if (m.experts == 0) m.sparse_layers.assign(m.sparse_layers.size(), false);
  if (m.experts > 0) m.shared_intermediate = positive(j, "shared_expert_intermediate_size", where, 512);
  // intermediate_size sizes the dense layers' MLP only (5632 when absent); with every layer
  // sparse it sizes nothing and is kept 0, as for Qwen3.5-MoE.
  bool dense = false;
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) dense = dense || !m.sparse(i);
  if (!dense) c.intermediate_size = 0;
  else if (!j.contains("intermediate_size")) c.intermediate_size = 5632;
}

// Qwen3-Next's fused projections (Qwen3NextGatedDeltaNet.fix_query_key_value_ordering): per key
// head g, in_proj_qkvz holds q_g (Dk rows), k_g (Dk rows), then the v and the z of its Hv / Hk
// value heads (Hv / Hk x Dv rows each); in_proj_ba holds the b then the a of those value heads.
// The block's in_proj_qkv is [every q_g; every k_g; every v_g], in_proj_z every z_g, in_proj_b
// and in_proj_a every b_g and a_g: the order the convolution's channels and the heads take.
std::vector<FusedTensor> next_fused_tensors(const ModelConfig& c) {
  const LinearAttention& l = c.arch.linear;
  const std::int64_t per_key = l.value_heads / l.key_heads;
  const std::string qkv = "linear_attn.in_proj_qkv.weight";
  return {{"linear_attn.in_proj_qkvz.weight",
           l.key_heads,
           {{qkv, l.key_dim}, {qkv, l.key_dim}, {qkv, per_key * l.value_dim}, {"linear_attn.in_proj_z.weight", per_key * l.value_dim}}},
          {"linear_attn.in_proj_ba.weight",
           l.key_heads,
           {{"linear_attn.in_proj_b.weight", per_key}, {"linear_attn.in_proj_a.weight", per_key}}}};
}

// A wrapper's text config (`text_type` its model_type), with the wrapper's keys the text part
// leaves out.
Json wrapped_text_config(const Json& j, const std::string& where, const std::string& text_type, const char* architecture) {
  const auto it = j.find("text_config");
  if (it == j.end() || !it->is_object())
    throw ConfigError(where + ": a " + j.value("model_type", std::string()) + " checkpoint needs \"text_config\" (an object), found " +
                      (it == j.end() ? std::string("none") : json_type_name(*it)));
  Json text = *it;
  if (const auto type = json_string(text, "model_type", where + ": text_config"); type && *type != text_type)
    throw UnsupportedError(where + ": text_config model_type \"" + *type + "\" is not supported (expected " + text_type + ")");
  inherit_wrapper_keys(j, text);
  text["model_type"] = text_type;
  text["architectures"] = Json::array({architecture});
  return text;
}

Json text_config(const Json& j, const std::string& where) { return wrapped_text_config(j, where, "qwen3_5_text", "Qwen3_5ForCausalLM"); }

Json moe_text_config(const Json& j, const std::string& where) {
  return wrapped_text_config(j, where, "qwen3_5_moe_text", "Qwen3_5MoeForCausalLM");
}

// The wrapper's layout: text tensors under model.language_model., the vision tower and the
// multi-token-prediction head ignored.
Wrapper wrapper(Json (*config)(const Json&, const std::string&)) {
  return Wrapper{config, {"model.language_model."}, {"lm_head.weight"}, {"model.visual.", "mtp."}};
}

// --- GGUF: llama.cpp's qwen35 ---

// The interval n with layer i full attention exactly when (i + 1) % n == 0 (the only layer
// pattern llama.cpp's converter writes: full_attention_interval); nullopt when none fits.
std::optional<std::int64_t> full_attention_interval(const ModelConfig& c) {
  for (std::int64_t n = 1; n <= c.num_hidden_layers + 1; ++n) {
    bool fits = true;
    for (std::int64_t i = 0; i < c.num_hidden_layers && fits; ++i) fits = c.arch.linear.layer(i) == ((i + 1) % n != 0);
    if (fits) return n;
  }
  return std::nullopt;
}

// rope.dimension_sections: llama.cpp rotates qwen35's queries and keys by interleaved
// multi-section RoPE, rotary pair p taking the temporal, height or width position by p % 3 while
// p % sum < 3 x that section (else a fourth position, 0 for text). For text the three are the
// token's position, so any sections that give every pair one of them rotate as ctune does; these
// split the pairs as Qwen3.5's [11, 11, 10] splits its 32 (the converter copies mrope_section,
// which ctune does not keep). ggml needs the sum at most head_dim.
std::vector<std::int32_t> rope_sections(const ModelConfig& c) {
  const auto pairs = static_cast<std::int32_t>(c.rope.rotary_dim(c.head_dim) / 2);
  const std::int32_t t = (pairs + 2) / 3, h = (pairs - t + 1) / 2;
  return {t, h, pairs - t - h, 0};
}

// What llama.cpp's qwen35 and qwen35moe (`arch`) cannot express: they share the layers.
void check_hybrid_gguf(const ModelConfig& c, const std::string& arch) {
  const std::string what = gguf_refusal(c), no_form = " has no " + arch + " GGUF form";
  if (c.arch.qkv_bias || c.arch.o_bias || c.arch.mlp_bias)
    throw UnsupportedError(what + "attention_bias" + no_form + " (llama.cpp's " + arch + " has no projection biases)");
  if (c.arch.activation != Activation::silu)
    throw UnsupportedError(what + "hidden_act other than silu" + no_form + " (llama.cpp's " + arch + " uses SiLU)");
  if (!c.arch.attn_output_gate)
    throw UnsupportedError(what + "attn_output_gate false" + no_form + " (llama.cpp's q_proj always carries the gate)");
  if (c.rope.type != "default")
    throw UnsupportedError(what + c.rope.type + " rope scaling" + no_form + " in ctune (expected none)");
  const LinearAttention& l = c.arch.linear;
  if (l.key_dim != l.value_dim)
    throw UnsupportedError(what + "linear_key_head_dim " + std::to_string(l.key_dim) + " != linear_value_head_dim " +
                           std::to_string(l.value_dim) + no_form + " (llama.cpp sizes both by ssm.state_size)");
  if (!full_attention_interval(c))
    throw UnsupportedError(what + "layer_types" + no_form + " (llama.cpp's converter writes full_attention_interval: "
                           "layer i full attention exactly when (i + 1) % n == 0)");
}

void check_gguf(const ModelConfig& c) { check_hybrid_gguf(c, "qwen35"); }

void write_gguf(GgufKeyWriter& w, const ModelConfig& c) {
  const LinearAttention& l = c.arch.linear;
  w.u32("ssm.conv_kernel", l.conv_kernel);
  w.u32("ssm.state_size", l.key_dim);
  w.u32("ssm.group_count", l.key_heads);
  w.u32("ssm.time_step_rank", l.value_heads);
  w.u32("ssm.inner_size", l.value_dim * l.value_heads);
  w.u32("full_attention_interval", *full_attention_interval(c));
  w.i32_array("rope.dimension_sections", rope_sections(c));
}

// Per layer whether it is linear attention: attention.recurrent_layers when the file has it
// (what llama.cpp reads first), else full_attention_interval (4 when absent).
std::vector<bool> read_linear_layers(const GgufKeys& keys, std::int64_t layers) {
  std::vector<bool> linear;
  if (const io::GgufValue* v = keys.find("attention.recurrent_layers")) {
    if (!v->is_array() || static_cast<std::int64_t>(v->size()) != layers)
      throw FormatError(keys.at("attention.recurrent_layers") + ": " + v->describe() + " (expected one entry per layer, " +
                        std::to_string(layers) + ")");
    for (std::size_t i = 0; i < v->size(); ++i) linear.push_back(v->bool_at(i, keys.at("attention.recurrent_layers")));
    return linear;
  }
  const std::int64_t interval = keys.integer_or("full_attention_interval", 4);
  if (interval <= 0) throw FormatError(keys.at("full_attention_interval") + ": " + std::to_string(interval) + " (expected >= 1)");
  for (std::int64_t i = 0; i < layers; ++i) linear.push_back((i + 1) % interval != 0);
  return linear;
}

void read_gguf(const GgufKeys& keys, ModelConfig& c) {
  c.arch.qk_norm = c.arch.norm_offset = c.arch.attn_output_gate = true;
  read_rotary_dimension(keys, c);
  LinearAttention& l = c.arch.linear;
  l.conv_kernel = keys.integer("ssm.conv_kernel");
  l.key_dim = keys.integer("ssm.state_size");
  l.key_heads = keys.integer("ssm.group_count");
  l.value_heads = keys.integer("ssm.time_step_rank");
  const std::int64_t inner = keys.integer("ssm.inner_size");
  if (l.conv_kernel <= 0 || l.key_dim <= 0 || l.key_heads <= 0 || l.value_heads <= 0 || l.value_heads % l.key_heads ||
      inner <= 0 || inner % l.value_heads)
    throw FormatError(keys.where() + ": ssm.* keys: kernel " + std::to_string(l.conv_kernel) + ", state " +
                      std::to_string(l.key_dim) + ", " + std::to_string(l.key_heads) + " key and " +
                      std::to_string(l.value_heads) + " value heads, inner size " + std::to_string(inner) +
                      " are not a Gated DeltaNet");
  l.value_dim = inner / l.value_heads;
  l.layers = read_linear_layers(keys, c.num_hidden_layers);
}

// The converter reorders the value heads of the DeltaNet's per-value-head tensors from grouped
// by key head (transformers' repeat_interleave of the key heads) to tiled (ggml's repeat), and
// stores -exp(A_log) and the convolution as [channels, kernel].
std::vector<GgufChange> gguf_changes(const ModelConfig& c) {
  using Kind = GgufChange::Kind;
  const LinearAttention& l = c.arch.linear;
  std::vector<GgufChange> out = {{"linear_attn.A_log", Kind::negative_exp}, {"linear_attn.conv1d.weight", Kind::drop_dim1}};
  if (l.key_heads <= 0 || l.value_heads == l.key_heads) return out;  // one value head per key head: nothing to reorder
  const std::int64_t per_key = l.value_heads / l.key_heads, qk_rows = 2 * l.key_heads * l.key_dim;
  auto tile = [&](const char* param, std::int64_t dim, std::int64_t offset, std::int64_t width) {
    out.push_back({param, Kind::tile_heads, dim, offset, l.key_heads, per_key, width});
  };
  tile("linear_attn.in_proj_qkv.weight", 0, qk_rows, l.value_dim);
  tile("linear_attn.conv1d.weight", 0, qk_rows, l.value_dim);
  tile("linear_attn.in_proj_z.weight", 0, 0, l.value_dim);
  tile("linear_attn.in_proj_b.weight", 0, 0, 1);
  tile("linear_attn.in_proj_a.weight", 0, 0, 1);
  tile("linear_attn.dt_bias", 0, 0, 1);
  tile("linear_attn.A_log", 0, 0, 1);
  tile("linear_attn.out_proj.weight", 1, 0, l.value_dim);
  return out;
}

GgufForm gguf_form() {
  auto tensors = llama_gguf_layer_tensors();
  for (auto& [hf, gguf] : tensors)
    if (hf == "post_attention_layernorm") gguf = "post_attention_norm";  // before the MLP, as llama.cpp's qwen35 names it
  tensors.insert(tensors.end(), {{"self_attn.q_norm", "attn_q_norm"},
                                 {"self_attn.k_norm", "attn_k_norm"},
                                 {"linear_attn.in_proj_qkv", "attn_qkv"},
                                 {"linear_attn.in_proj_z", "attn_gate"},
                                 {"linear_attn.in_proj_b", "ssm_beta"},
                                 {"linear_attn.in_proj_a", "ssm_alpha"},
                                 {"linear_attn.conv1d", "ssm_conv1d"},
                                 {"linear_attn.norm", "ssm_norm"},
                                 {"linear_attn.out_proj", "ssm_out"}});
  GgufForm g{"qwen35", false, tensors, /*norm_plus_one=*/true};
  g.plain_norms = {"linear_attn.norm"};
  g.layer_parameters = {{"linear_attn.A_log", "ssm_a"}, {"linear_attn.dt_bias", "ssm_dt.bias"}};
  g.f32_parameters = {"linear_attn.conv1d.weight"};
  g.changes = gguf_changes;
  g.check = check_gguf;
  g.write_keys = write_gguf;
  g.read_keys = read_gguf;
  return g;
}

// --- GGUF: llama.cpp's qwen35moe ---

// qwen35's refusals, and what its mixture fixes: every layer sparse (Qwen3.5-MoE's are), the
// chosen weights renormalised (Qwen3.5-MoE always does), and a shared expert, whose tensors its
// loader requires.
void check_moe_gguf(const ModelConfig& c) {
  check_hybrid_gguf(c, "qwen35moe");
  check_gguf_experts(c, "qwen35moe");
  if (c.arch.moe.shared_intermediate <= 0)
    throw UnsupportedError(gguf_refusal(c) + "shared_expert_intermediate_size 0 has no qwen35moe GGUF form (llama.cpp's "
                           "qwen35moe requires the shared expert's tensors)");
}

void write_moe_gguf(GgufKeyWriter& w, const ModelConfig& c) {
  write_gguf(w, c);
  w.u32("expert_feed_forward_length", c.arch.moe.intermediate);
  w.u32("expert_shared_feed_forward_length", c.arch.moe.shared_intermediate);
}

// The experts' widths with llama.cpp's fallbacks: feed_forward_length / expert_used_count for the
// routed experts, feed_forward_length for the shared one.
void read_moe_gguf(const GgufKeys& keys, ModelConfig& c) {
  read_gguf(keys, c);
  MoeArchitecture& m = c.arch.moe;
  m.intermediate = keys.integer_or("expert_feed_forward_length", m.top_k > 0 ? c.intermediate_size / m.top_k : 0);
  m.shared_intermediate = keys.integer_or("expert_shared_feed_forward_length", c.intermediate_size);
  if (m.shared_intermediate <= 0)
    throw FormatError(keys.at("expert_shared_feed_forward_length") + ": " + std::to_string(m.shared_intermediate) +
                      " (expected the shared expert's width, >= 1)");
}

// qwen35's tensors without the dense MLP's, plus Qwen2-MoE's names for the router
// (ffn_gate_inp), the shared expert (ffn_{gate,up,down}_shexp) and its gate (ffn_gate_inp_shexp,
// [1, H]: ne [H, 1], which llama.cpp's loader takes for its [H]); the routed experts are
// stacked (GgufForm::experts).
GgufForm moe_gguf_form() {
  GgufForm g = gguf_form();
  const ModuleNames n;
  const std::string dense = n.mlp + ".", sparse = n.sparse_mlp + ".", shared = sparse + n.shared_expert + ".";
  auto& t = g.layer_tensors;
  t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& p) { return p.first.compare(0, dense.size(), dense) == 0; }), t.end());
  t.insert(t.end(), {{sparse + "gate", "ffn_gate_inp"},
                     {shared + n.gate, "ffn_gate_shexp"},
                     {shared + n.up, "ffn_up_shexp"},
                     {shared + n.down, "ffn_down_shexp"},
                     {sparse + n.shared_expert_gate, "ffn_gate_inp_shexp"}});
  g.architecture = "qwen35moe";
  g.experts = true;
  g.check = check_moe_gguf;
  g.write_keys = write_moe_gguf;
  g.read_keys = read_moe_gguf;
  return g;
}

// What the dense and MoE text families share: 32768 positions and head_dim 256 by default,
// partial rotary, the multi-token-prediction head ignored.
Family text_family(const std::string& type, void (*parse)(const Json&, const std::string&, ModelConfig&), GgufForm gguf) {
  Family q{type, {type}, 32768, 256, parse, std::move(gguf)};
  q.partial_rotary = true;
  q.ignored_prefixes = {"mtp."};
  return q;
}

}  // namespace

const Family& qwen3_5_text() {
  static const Family f = text_family("qwen3_5_text", parse_text, gguf_form());
  return f;
}

const Family& qwen3_5() {
  static const Family f = [] {
    Family w{"qwen3_5", {"qwen3_5"}};
    w.wrapper = wrapper(text_config);
    return w;
  }();
  return f;
}

const Family& qwen3_5_moe_text() {
  static const Family f = [] {
    Family q = text_family("qwen3_5_moe_text", parse_moe, moe_gguf_form());
    q.no_dense_mlp = true;
    return q;
  }();
  return f;
}

const Family& qwen3_5_moe() {
  static const Family f = [] {
    Family w{"qwen3_5_moe", {"qwen3_5_moe"}};
    w.wrapper = wrapper(moe_text_config);
    return w;
  }();
  return f;
}

const Family& qwen3_next() {
  static const Family f = [] {
    Family q = text_family("qwen3_next", parse_next, GgufForm{});
    q.no_dense_mlp = true;  // intermediate_size optional: parse_next sizes the dense layers
    q.fused_tensors = next_fused_tensors;
    return q;
  }();
  return f;
}

}  // namespace ctune::model::families
