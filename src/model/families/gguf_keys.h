// What the families with a GGUF form share (torch-free): one architecture's keys of a GGUF
// header, read and written under "<architecture>.", and the rules of llama.cpp that several
// architectures have. export/gguf_metadata.cpp writes and reads the keys every architecture has;
// a family's GgufForm hooks (model/family.h) use these for its own (docs/families.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/config.h"

namespace ctune::model {

// longrope (llama.cpp's phi3): the per-pair factors, each [rotary_dim / 2] in F32.
inline constexpr const char* kRopeFactorsLongName = "rope_factors_long.weight";
inline constexpr const char* kRopeFactorsShortName = "rope_factors_short.weight";

// The keys "<architecture>.<key>" of one header; FormatError naming `where` and the key for a
// missing or mistyped one. Any integer or float type is accepted.
class GgufKeys {
 public:
  GgufKeys(const io::GgufHeader& header, std::string architecture, std::string where);

  std::int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  std::int64_t integer_or(const std::string& key, std::int64_t fallback) const;
  double number_or(const std::string& key, double fallback) const;
  const io::GgufValue* find(const std::string& key) const;
  bool has_tensor(const std::string& name) const;
  // "<where>: <architecture>.<key>", how messages name a key.
  std::string at(const std::string& key) const;
  const std::string& where() const { return where_; }

 private:
  const io::GgufHeader& header_;
  std::string prefix_, where_;
};

// Writes "<architecture>.<key>" as llama.cpp's loader reads it: integers as u32, floats as f32.
class GgufKeyWriter {
 public:
  GgufKeyWriter(io::GgufWriter& writer, std::string architecture);
  void u32(const std::string& key, std::int64_t value);
  void f32(const std::string& key, double value);
  void string(const std::string& key, std::string value);
  void i32_array(const std::string& key, const std::vector<std::int32_t>& values);

 private:
  io::GgufWriter& writer_;
  std::string prefix_;
};

// "model_type <type>: ", how export refusals start.
std::string gguf_refusal(const ModelConfig& config);
// llama.cpp's MoE layers (llama with experts, qwen3moe): every layer sparse, softmax routing
// over all experts, the chosen k weights always renormalised (build_moe_ffn with norm_w).
// Refuses any other mixture; nothing for a dense config.
void check_gguf_experts(const ModelConfig& config, const std::string& architecture);
// The rotary fraction of each head from rope.dimension_count (the whole head when absent), as
// partial_rotary_factor; FormatError unless an even count up to head_dim.
void read_rotary_dimension(const GgufKeys& keys, ModelConfig& config);
// llama.cpp reads rope_freqs (llama3 rope scaling) for `llama` only.
void refuse_rope_freqs(const ModelConfig& config, const std::string& architecture);

}  // namespace ctune::model
