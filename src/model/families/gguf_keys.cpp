#include "model/families/gguf_keys.h"

#include <utility>

#include "core/error.h"

namespace ctune::model {

GgufKeys::GgufKeys(const io::GgufHeader& header, std::string architecture, std::string where)
    : header_(header), prefix_(std::move(architecture) + "."), where_(std::move(where)) {}

std::string GgufKeys::at(const std::string& key) const { return where_ + ": " + prefix_ + key; }

const io::GgufValue* GgufKeys::find(const std::string& key) const { return header_.find(prefix_ + key); }

std::int64_t GgufKeys::integer(const std::string& key) const { return header_.require(prefix_ + key, where_).as_int(at(key)); }

double GgufKeys::number(const std::string& key) const { return header_.require(prefix_ + key, where_).as_float(at(key)); }

std::int64_t GgufKeys::integer_or(const std::string& key, std::int64_t fallback) const {
  const io::GgufValue* v = find(key);
  return v ? v->as_int(at(key)) : fallback;
}

double GgufKeys::number_or(const std::string& key, double fallback) const {
  const io::GgufValue* v = find(key);
  return v ? v->as_float(at(key)) : fallback;
}

bool GgufKeys::has_tensor(const std::string& name) const { return header_.find_tensor(name) != nullptr; }

GgufKeyWriter::GgufKeyWriter(io::GgufWriter& writer, std::string architecture)
    : writer_(writer), prefix_(std::move(architecture) + ".") {}

void GgufKeyWriter::u32(const std::string& key, std::int64_t value) {
  writer_.set(prefix_ + key, io::GgufValue::u32(static_cast<std::uint32_t>(value)));
}

void GgufKeyWriter::f32(const std::string& key, double value) {
  writer_.set(prefix_ + key, io::GgufValue::f32(static_cast<float>(value)));
}

void GgufKeyWriter::string(const std::string& key, std::string value) {
  writer_.set(prefix_ + key, io::GgufValue::string(std::move(value)));
}

void GgufKeyWriter::i32_array(const std::string& key, const std::vector<std::int32_t>& values) {
  writer_.set(prefix_ + key, io::GgufValue::i32_array(values));
}

std::string gguf_refusal(const ModelConfig& c) { return "model_type " + c.model_type + ": "; }

void check_gguf_experts(const ModelConfig& c, const std::string& arch) {
  const MoeArchitecture& m = c.arch.moe;
  if (m.experts == 0) return;
  const std::string what = gguf_refusal(c);
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
    if (!m.sparse(i))
      throw UnsupportedError(what + "dense layer " + std::to_string(i) + " (mlp_only_layers / decoder_sparse_step) has no " + arch +
                             " GGUF form (llama.cpp's " + arch + " makes every layer sparse)");
  if (!m.normalize_top_k)
    throw UnsupportedError(what + "norm_topk_prob false has no " + arch +
                           " GGUF form (llama.cpp renormalises the chosen experts' weights)");
}

void refuse_rope_freqs(const ModelConfig& c, const std::string& arch) {
  if (c.rope.type == "llama3")
    throw UnsupportedError(gguf_refusal(c) + "llama3 rope scaling has no " + arch +
                           " GGUF form (llama.cpp reads rope_freqs for llama only)");
}

void read_rotary_dimension(const GgufKeys& keys, ModelConfig& c) {
  const std::int64_t rotary = keys.integer_or("rope.dimension_count", c.head_dim);
  if (rotary <= 0 || rotary > c.head_dim || rotary % 2)
    throw FormatError(keys.at("rope.dimension_count") + ": " + std::to_string(rotary) + " (expected an even count up to " +
                      std::to_string(c.head_dim) + ")");
  c.rope.partial_rotary_factor = static_cast<double>(rotary) / static_cast<double>(c.head_dim);
}

}  // namespace ctune::model
