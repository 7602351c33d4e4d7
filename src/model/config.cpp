#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/family.h"

namespace ctune::model {

namespace {

std::int64_t require_positive(const Json& j, const char* key, const std::string& where,
                              std::optional<std::int64_t> fallback = std::nullopt) {
  auto v = json_int(j, key, where);
  if (!v) v = fallback;
  if (!v) throw ConfigError(where + ": missing required key \"" + key + "\"");
  if (*v <= 0) throw ConfigError(where + ": \"" + key + "\" must be positive, found " + std::to_string(*v));
  // Past this, products of dimensions overflow 64-bit byte counts and no tensor could exist;
  // the largest real values are ~2^18 (vocabularies) and ~2^16 (intermediate sizes).
  constexpr std::int64_t kMaxDimension = std::int64_t{1} << 24;
  if (*v > kMaxDimension) {
    throw ConfigError(where + ": \"" + key + "\" is " + std::to_string(*v) + ", past any real model (at most " +
                      std::to_string(kMaxDimension) + ")");
  }
  return *v;
}

// A number as config.json would spell it ("1e+300", "4096.0"); "inf" past double's range.
std::string number_text(double v) {
  if (std::isfinite(v)) return Json(v).dump();
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

// Every value a rope type derives from its keys enters float32 math (inv_freq, cos and sin are
// float32, as transformers computes them), where anything past float32's range is infinite and
// every rotation after it garbage: refused, naming the key and the value (`given`) that made it.
void require_finite_in_fp32(double derived, const std::string& where, const std::string& key, const std::string& given,
                            const std::string& what) {
  if (std::isfinite(derived) && std::abs(derived) <= static_cast<double>(std::numeric_limits<float>::max())) return;
  throw ConfigError(where + ": \"" + key + "\" " + given + " makes " + what + " " + number_text(derived) +
                    ", past float32's range (at most 3.4e38; expected a value that keeps it finite)");
}

// Each rope type's derived values (docs/formats.md#rope), bounded by the fastest base frequency
// max_i θ^(−2i/d): 1, or θ^(−(d−2)/d) when θ < 1. dynamic is refused by parse_rope, so it
// derives nothing here.
void require_finite_rope(const RopeConfig& r, std::int64_t head_dim, const std::string& where) {
  const double d = static_cast<double>(r.rotary_dim(head_dim));
  const double fastest = std::max(1.0, std::pow(r.theta, -(d - 2) / d));
  require_finite_in_fp32(fastest, where, "rope_theta", number_text(r.theta), "the fastest rotary frequency theta^(-(d-2)/d)");
  if (r.type == "linear" || r.type == "llama3" || r.type == "yarn")
    require_finite_in_fp32(fastest / r.factor, where, "factor", number_text(r.factor), "the scaled frequency inv_freq / factor");
  if (r.type == "llama3") {
    const auto l0 = static_cast<double>(r.original_max_position);
    require_finite_in_fp32(l0 / r.low_freq_factor, where, "low_freq_factor", number_text(r.low_freq_factor),
                           "the wavelength original_max_position_embeddings / low_freq_factor");
    require_finite_in_fp32(l0 / r.high_freq_factor, where, "high_freq_factor", number_text(r.high_freq_factor),
                           "the wavelength original_max_position_embeddings / high_freq_factor");
    require_finite_in_fp32(1.0 / (r.high_freq_factor - r.low_freq_factor), where, "high_freq_factor", number_text(r.high_freq_factor),
                           "the blend's 1 / (high_freq_factor - low_freq_factor)");
  }
  if (r.type == "longrope") {
    for (auto [key, factors] : {std::pair{"short_factor", &r.short_factor}, std::pair{"long_factor", &r.long_factor}}) {
      const double smallest = *std::min_element(factors->begin(), factors->end());
      require_finite_in_fp32(fastest / smallest, where, key, number_text(smallest), "the scaled frequency inv_freq / " + std::string(key));
    }
    require_finite_in_fp32(r.attention_factor, where, "attention_factor", number_text(r.attention_factor), "the scale of cos and sin");
  }
  if (r.type == "yarn")
    require_finite_in_fp32(r.attention_factor, where, "attention_factor", number_text(r.attention_factor), "the scale of cos and sin");
}

// yarn's keys (transformers' _compute_yarn_parameters); factor, original_max_position_embeddings
// and attention_factor may be left to finish_yarn (0 here).
void parse_yarn(const Json& s, const std::string& at, RopeConfig& rope) {
  rope.factor = 0;
  rope.attention_factor = 0;
  rope.original_max_position = 0;
  auto positive = [&](const char* key, double& out) {
    if (auto v = json_number(s, key, at)) {
      if (!(*v > 0) || !std::isfinite(*v)) throw ConfigError(at + ": \"" + key + "\" must be a positive number, found " + number_text(*v));
      out = *v;
    }
  };
  positive("factor", rope.factor);
  positive("attention_factor", rope.attention_factor);
  positive("beta_fast", rope.beta_fast);
  positive("beta_slow", rope.beta_slow);
  positive("mscale", rope.mscale);
  positive("mscale_all_dim", rope.mscale_all_dim);
  if (auto l0 = json_int(s, "original_max_position_embeddings", at)) {
    if (*l0 <= 0) throw ConfigError(at + ": \"original_max_position_embeddings\" must be positive, found " + std::to_string(*l0));
    rope.original_max_position = *l0;
  }
  rope.truncate = json_bool(s, "truncate", at).value_or(true);
}

// A sparse layer builds one module per expert (model/moe.h: an MLP of three projections), so the
// module tree's own memory grows with layers x experts whatever the dimensions: 16384 experts on
// each of 1024 layers, 100 M parameters of a 552-byte config.json, passed every other bound and
// `ctune estimate` died at 5.3 GB building them. Released models have at most 24576 (Qwen3-Next:
// 512 experts on 48 layers; Kimi K2 384 on 60); 2^16 leaves room for the next and holds the
// shape-only model's own memory to about 450 MB (measured, `ctune estimate` of 64 tiny layers:
// peak 222 MB at 128 experts, 606 MB at 1024, about 6.7 kB a module; docs/families.md).
void require_few_expert_modules(const ModelConfig& c, const std::string& where) {
  constexpr std::int64_t kMaxExpertModules = std::int64_t{1} << 16;
  const auto sparse = std::count(c.arch.moe.sparse_layers.begin(), c.arch.moe.sparse_layers.end(), true);
  const std::int64_t experts = c.arch.moe.experts * static_cast<std::int64_t>(sparse);
  if (experts <= kMaxExpertModules) return;
  throw ConfigError(where + ": " + std::to_string(c.arch.moe.experts) + " experts on each of " + std::to_string(sparse) +
                    " sparse layers are " + std::to_string(experts) + " expert modules, past any real model (at most " +
                    std::to_string(kMaxExpertModules) + ")");
}

}  // namespace

// Reads the rope section from either spelling. v5 puts everything in rope_parameters; v4 has
// top-level rope_theta and an optional rope_scaling object.
RopeConfig parse_rope(const Json& j, const std::string& where, double default_theta, bool yarn) {
  RopeConfig rope;
  rope.theta = default_theta;
  const Json* scaling = nullptr;
  std::string section = "rope_scaling";
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    scaling = &j["rope_parameters"];
    section = "rope_parameters";
  } else if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    scaling = &j["rope_scaling"];
  }
  if (auto theta = json_number(j, "rope_theta", where)) rope.theta = *theta;
  if (scaling) {
    const std::string at = where + ": " + section;
    if (!scaling->is_object()) throw ConfigError(at + " must be an object, found " + json_type_name(*scaling));
    if (auto theta = json_number(*scaling, "rope_theta", at)) rope.theta = *theta;
    auto type = json_string(*scaling, "rope_type", at);
    if (!type) type = json_string(*scaling, "type", at);  // legacy spelling
    rope.type = type.value_or("default");
    if (rope.type == "longrope") {
      rope.attention_factor = 0;
      for (auto [key, out] : {std::pair{"short_factor", &rope.short_factor}, std::pair{"long_factor", &rope.long_factor}}) {
        const auto it = scaling->find(key);
        if (it == scaling->end() || !it->is_array() || it->empty())
          throw ConfigError(at + ": rope type \"longrope\" requires \"" + key + "\" (a list of numbers)");
        for (const Json& v : *it) {
          if (!v.is_number() || !(v.get<double>() > 0))
            throw ConfigError(at + ": \"" + std::string(key) + "\" entries must be positive numbers, found " + v.dump());
          out->push_back(v.get<double>());
        }
      }
      if (auto f = json_number(*scaling, "attention_factor", at)) {
        if (!(*f > 0)) throw ConfigError(at + ": \"attention_factor\" must be positive, found " + std::to_string(*f));
        rope.attention_factor = *f;  // else 0: derived in parse_model_config
      }
      if (auto f = json_number(*scaling, "factor", at)) rope.factor = *f;
      if (auto l0 = json_int(*scaling, "original_max_position_embeddings", at)) rope.original_max_position = *l0;
      else rope.original_max_position = 0;  // from the top level or max_position_embeddings (parse_model_config)
    } else if (rope.type == "linear" || rope.type == "llama3") {
      auto factor = json_number(*scaling, "factor", at);
      if (!factor) throw ConfigError(at + ": rope type \"" + rope.type + "\" requires \"factor\"");
      if (!(*factor > 0)) throw ConfigError(at + ": \"factor\" must be positive, found " + std::to_string(*factor));
      rope.factor = *factor;
    }
    if (rope.type == "llama3") {
      auto lf = json_number(*scaling, "low_freq_factor", at);
      auto hf = json_number(*scaling, "high_freq_factor", at);
      auto l0 = json_int(*scaling, "original_max_position_embeddings", at);
      if (!lf || !hf || !l0) {
        throw ConfigError(at + ": rope type \"llama3\" requires low_freq_factor, high_freq_factor and "
                               "original_max_position_embeddings");
      }
      if (!(*hf > *lf) || !(*lf > 0) || *l0 <= 0) {
        throw ConfigError(at + ": llama3 rope needs 0 < low_freq_factor < high_freq_factor and a positive "
                               "original_max_position_embeddings, found " + std::to_string(*lf) + ", " +
                          std::to_string(*hf) + ", " + std::to_string(*l0));
      }
      rope.low_freq_factor = *lf;
      rope.high_freq_factor = *hf;
      rope.original_max_position = *l0;
    } else if (rope.type == "yarn" && yarn) {
      parse_yarn(*scaling, at, rope);
    } else if (rope.type != "default" && rope.type != "linear" && rope.type != "longrope") {
      throw UnsupportedError(at + ": rope type \"" + rope.type + "\" is not supported (supported: default, linear, llama3, longrope" +
                             (yarn ? ", yarn)" : ")"));
    }
  }
  if (!(rope.theta > 0) || !std::isfinite(rope.theta)) {
    throw ConfigError(where + ": rope_theta must be a positive number, found " + std::to_string(rope.theta));
  }
  return rope;
}

namespace {

std::vector<std::int64_t> parse_eos(const Json& j, const std::string& where) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  if (it->is_number_integer()) return {it->get<std::int64_t>()};
  if (it->is_array()) {
    std::vector<std::int64_t> ids;
    for (const auto& v : *it) {
      if (!v.is_number_integer()) throw ConfigError(where + ": eos_token_id entries must be integers, found " + v.dump());
      ids.push_back(v.get<std::int64_t>());
    }
    return ids;
  }
  throw ConfigError(where + ": eos_token_id expected an integer or a list, found " + json_type_name(*it));
}

}  // namespace

ProjectionShape ModelConfig::projection(const std::string& name) const {
  const std::int64_t H = hidden_size, q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  if (name == "q_proj") return {H, arch.attn_output_gate ? 2 * q : q, arch.qkv_bias};
  if (name == "k_proj" || name == "v_proj") return {H, kv, arch.qkv_bias};
  if (name == "o_proj") return {q, H, arch.o_bias};
  if (name == "gate_proj" || name == "up_proj") return {H, intermediate_size, arch.mlp_bias};
  if (name == "down_proj") return {intermediate_size, H, arch.mlp_bias};
  if (name == "qkv_proj") return {H, q + 2 * kv, arch.qkv_bias};
  if (name == "gate_up_proj") return {H, 2 * intermediate_size, arch.mlp_bias};
  throw ConfigError("\"" + name + "\" is not a decoder projection (expected one of q_proj ... down_proj, qkv_proj, gate_up_proj)");
}

// transformers' _compute_longrope_parameters: the original context is the top-level
// original_max_position_embeddings (Phi-3), else the section's, else max_position_embeddings;
// factor = max / original when the top level gives it; attention_factor, unless given,
// sqrt(1 + ln factor / ln original) for factor > 1, else 1. One factor per rotated pair.
static void finish_longrope(const Json& j, const std::string& where, ModelConfig& c) {
  RopeConfig& r = c.rope;
  const auto top = json_int(j, "original_max_position_embeddings", where);
  if (top) {
    r.original_max_position = *top;
    r.factor = static_cast<double>(c.max_position_embeddings) / static_cast<double>(*top);
  } else if (r.original_max_position <= 0) {
    r.original_max_position = c.max_position_embeddings;
  }
  if (r.original_max_position <= 0)
    throw ConfigError(where + ": original_max_position_embeddings must be positive, found " + std::to_string(r.original_max_position));
  if (r.attention_factor == 0) {
    r.attention_factor = r.factor <= 1.0 ? 1.0
                                         : std::sqrt(1.0 + std::log(r.factor) / std::log(static_cast<double>(r.original_max_position)));
    // An original context of 1 divides by ln 1 = 0 (transformers raises ZeroDivisionError there).
    require_finite_in_fp32(r.attention_factor, where, "original_max_position_embeddings", std::to_string(r.original_max_position),
                           "longrope's attention factor sqrt(1 + ln(factor " + number_text(r.factor) + ") / ln(original))");
  }
  const auto pairs = static_cast<std::size_t>(r.rotary_dim(c.head_dim) / 2);
  if (r.short_factor.size() != pairs || r.long_factor.size() != pairs) {
    throw ConfigError(where + ": longrope short_factor and long_factor must have one entry per rotated pair (" +
                      std::to_string(pairs) + "), found " + std::to_string(r.short_factor.size()) + " and " +
                      std::to_string(r.long_factor.size()));
  }
}

// transformers' _compute_yarn_parameters: the original context from the section, else
// max_position_embeddings; factor, when absent, max_position_embeddings / original; the
// attention factor, unless given, mscale(factor, mscale) / mscale(factor, mscale_all_dim) when
// both are set, else mscale(factor), with mscale(s, m) = 0.1 m ln s + 1 for s > 1, else 1.
static void finish_yarn(ModelConfig& c) {
  RopeConfig& r = c.rope;
  if (r.original_max_position <= 0) r.original_max_position = c.max_position_embeddings;
  if (r.factor <= 0) r.factor = static_cast<double>(c.max_position_embeddings) / static_cast<double>(r.original_max_position);
  auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  if (r.attention_factor <= 0) {
    r.attention_factor = r.mscale > 0 && r.mscale_all_dim > 0 ? mscale(r.factor, r.mscale) / mscale(r.factor, r.mscale_all_dim)
                                                              : mscale(r.factor, 1.0);
  }
}

void set_partial_rotary(ModelConfig& c, double factor, const std::string& where) {
  const auto rot = static_cast<std::int64_t>(static_cast<double>(c.head_dim) * factor);
  if (!(factor > 0 && factor <= 1) || rot < 2 || rot % 2 != 0)
    throw ConfigError(where + ": partial_rotary_factor " + std::to_string(factor) + " must leave an even number of rotated "
                      "dimensions in (0, head_dim " + std::to_string(c.head_dim) + "], found " + std::to_string(rot));
  c.rope.partial_rotary_factor = factor;
}

std::int64_t ModelConfig::mlp_width() const {
  return intermediate_size > 0 || arch.moe.experts == 0 ? intermediate_size : arch.moe.token_width();
}

double ModelConfig::attention_scale() const {
  return 1.0 / std::sqrt(arch.query_pre_attn_scalar ? *arch.query_pre_attn_scalar : static_cast<double>(head_dim));
}

ModelConfig parse_model_config(const Json& j, const std::string& where) {
  if (!j.is_object()) throw ConfigError(where + ": expected a JSON object, found " + json_type_name(j));
  ModelConfig c;
  c.raw = j;
  auto type = json_string(j, "model_type", where);
  if (!type) throw ConfigError(where + ": missing \"model_type\"");
  c.model_type = *type;
  const Family& family = family_for_model_type(c.model_type, where);
  if (family.wrapper) {
    ModelConfig text = parse_model_config(family.wrapper->text_config(j, where), where + ": text_config");
    text.wrapper_type = family.name;
    return text;
  }

  c.vocab_size = require_positive(j, "vocab_size", where);
  c.hidden_size = require_positive(j, "hidden_size", where);
  c.intermediate_size = family.no_dense_mlp ? json_int(j, "intermediate_size", where).value_or(0)
                                            : require_positive(j, "intermediate_size", where);
  c.num_hidden_layers = require_positive(j, "num_hidden_layers", where);
  // Each layer is a few modules, and some walks over them are not linear (`ctune info` took 16 s
  // at 4096 tiny layers); 2^24 tiny layers held 22 GB after two minutes of `init`. Released
  // models have at most about 130 layers.
  constexpr std::int64_t kMaxLayers = 1024;
  if (c.num_hidden_layers > kMaxLayers) {
    throw ConfigError(where + ": \"num_hidden_layers\" is " + std::to_string(c.num_hidden_layers) +
                      ", past any real model (at most " + std::to_string(kMaxLayers) + ")");
  }
  c.num_attention_heads = require_positive(j, "num_attention_heads", where);
  c.num_key_value_heads = require_positive(j, "num_key_value_heads", where, c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw ConfigError(where + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                      ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) + ")");
  }
  auto head_dim = json_int(j, "head_dim", where);
  if (!head_dim) head_dim = family.default_head_dim;
  if (auto hd = head_dim) {
    if (*hd <= 0 || *hd > 4096) throw ConfigError(where + ": \"head_dim\" must be in 1..4096, found " + std::to_string(*hd));
    c.head_dim = *hd;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      throw ConfigError(where + ": hidden_size (" + std::to_string(c.hidden_size) +
                        ") is not divisible by num_attention_heads (" + std::to_string(c.num_attention_heads) +
                        ") and no head_dim is given");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    throw ConfigError(where + ": head_dim must be even for rotary embeddings, found " + std::to_string(c.head_dim));
  }
  c.max_position_embeddings = json_int(j, "max_position_embeddings", where).value_or(family.default_max_position);
  if (c.max_position_embeddings <= 0) {
    throw ConfigError(where + ": \"max_position_embeddings\" must be positive, found " + std::to_string(c.max_position_embeddings));
  }
  c.rms_norm_eps = json_number(j, "rms_norm_eps", where).value_or(1e-6);
  if (!(c.rms_norm_eps > 0)) throw ConfigError(where + ": rms_norm_eps must be positive, found " + std::to_string(c.rms_norm_eps));
  c.rope = parse_rope(j, where, family.default_rope_theta, family.yarn);
  if (auto prf = json_number(j, "partial_rotary_factor", where); prf && *prf != 1.0) {
    if (!family.partial_rotary)
      throw UnsupportedError(where + ": partial_rotary_factor " + std::to_string(*prf) + " is not supported for model_type " +
                             c.model_type + " (expected 1.0)");
    set_partial_rotary(c, *prf, where);
  }
  if (c.rope.type == "longrope") finish_longrope(j, where, c);
  c.tie_word_embeddings = json_bool(j, "tie_word_embeddings", where).value_or(family.default_tied);
  c.arch.names = family.names;
  family.parse(j, where, c);  // may set the family's default rope (gpt-oss: yarn)
  if (c.rope.type == "yarn") finish_yarn(c);
  for (std::int64_t layer = 0; layer < c.num_hidden_layers && c.intermediate_size <= 0; ++layer)
    if (!c.arch.moe.sparse(layer))
      throw ConfigError(where + ": layer " + std::to_string(layer) + " has a dense MLP, which needs a positive \"intermediate_size\"");
  require_finite_rope(c.rope, c.head_dim, where);  // after the family: Gemma 3 reads its ropes itself
  if (c.arch.local_rope) require_finite_rope(*c.arch.local_rope, c.head_dim, where + ": the sliding layers' rope");
  require_few_expert_modules(c, where);

  auto dtype = json_string(j, "dtype", where);
  if (!dtype) dtype = json_string(j, "torch_dtype", where);
  c.dtype = dtype.value_or("float32");
  c.initializer_range = json_number(j, "initializer_range", where).value_or(0.02);
  c.bos_token_id = json_int(j, "bos_token_id", where);
  c.pad_token_id = json_int(j, "pad_token_id", where);
  c.eos_token_ids = parse_eos(j, where);
  // Each dimension is bounded; their product too: 2^40 parameters (4 TB in fp32) is past any
  // checkpoint ctune can train, and a count like that is a corrupt or hostile file.
  const double params = static_cast<double>(c.vocab_size) * static_cast<double>(c.hidden_size) * 2 +
                        static_cast<double>(c.num_hidden_layers) *
                            (4.0 * static_cast<double>(c.hidden_size) * static_cast<double>(c.num_attention_heads * c.head_dim) +
                             3.0 * static_cast<double>(c.hidden_size) * static_cast<double>(c.intermediate_size) +
                             3.0 * static_cast<double>(c.hidden_size) *
                                 (static_cast<double>(c.arch.moe.intermediate) * static_cast<double>(c.arch.moe.experts) +
                                  static_cast<double>(c.arch.moe.shared_intermediate)));
  if (params > 1099511627776.0) {
    throw ConfigError(where + ": the sizes describe about " + std::to_string(static_cast<long long>(params / 1e9)) +
                      " billion parameters, past any model ctune can load (check hidden_size, intermediate_size, "
                      "num_hidden_layers, vocab_size, the expert count)");
  }
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  return parse_model_config(read_json_file(path), path.string());
}

bool LinearAttention::any() const { return std::find(layers.begin(), layers.end(), true) != layers.end(); }

std::optional<std::int64_t> Architecture::sliding_window() const {
  const auto largest = std::max_element(layer_windows.begin(), layer_windows.end());
  if (largest == layer_windows.end() || *largest == 0) return std::nullopt;
  return *largest;
}

std::optional<std::int64_t> read_sliding_window(const Json& j, const std::string& where) {
  const auto window = json_int(j, "sliding_window", where);
  if (!window) return std::nullopt;
  if (*window <= 0) throw ConfigError(where + ": sliding_window must be positive, found " + std::to_string(*window));
  return window;
}

Json config_to_json(const ModelConfig& config, const std::string& dtype) {
  Json j = config.raw;
  j["torch_dtype"] = dtype;  // transformers < 4.56 reads this key
  j["dtype"] = dtype;        // newer versions read this one
  return j;
}

std::vector<std::int64_t> generation_stop_ids(const ModelConfig& config, const std::filesystem::path& model_dir) {
  std::vector<std::int64_t> ids = config.eos_token_ids;
  const auto path = model_dir / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    for (auto id : parse_eos(read_json_file(path), path.string()))
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

}  // namespace ctune::model
