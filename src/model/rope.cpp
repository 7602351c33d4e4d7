#include "model/rope.h"

#include <cmath>

namespace ctune::model {

at::Tensor rope_inv_freq(const ModelConfig& config) { return rope_inv_freq(config.rope, config.head_dim); }

at::Tensor rope_inv_freq(const RopeConfig& r, std::int64_t head_dim) {
  const auto d = r.rotary_dim(head_dim);  // partial rotary: only the leading dimensions rotate
  // 1 / theta^(2i/d), computed as HF does (int64 arange -> float, pow in fp32).
  auto exponent = at::arange(0, d, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) / static_cast<double>(d);
  auto inv_freq = 1.0 / at::pow(r.theta, exponent);
  if (r.type == "linear") return inv_freq / r.factor;
  if (r.type == "longrope") return inv_freq / at::tensor(r.short_factor, at::kDouble).to(at::kFloat);
  if (r.type == "llama3") {
    const double low_wavelen = r.original_max_position / r.low_freq_factor;
    const double high_wavelen = r.original_max_position / r.high_freq_factor;
    auto wavelen = 2 * M_PI / inv_freq;
    // Long wavelengths are divided by the factor, short ones kept; the band between is blended.
    auto scaled = at::where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq);
    auto smooth = (r.original_max_position / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    auto blended = (1 - smooth) * scaled / r.factor + smooth * scaled;
    auto medium = at::logical_not(wavelen < high_wavelen) & at::logical_not(wavelen > low_wavelen);
    return at::where(medium, blended, scaled);
  }
  return inv_freq;
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, const at::Tensor& position_ids,
                                               at::ScalarType dtype, double scale) {
  // freqs[b, t, i] = pos[b, t] * inv_freq[i]
  auto freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv_freq.to(position_ids.device()).view({1, 1, -1});
  auto emb = at::cat({freqs, freqs}, -1);
  const auto held = dtype == at::kDouble ? at::kDouble : at::kFloat;
  auto c = emb.cos(), s = emb.sin();
  if (scale != 1.0) c = c * scale, s = s * scale;
  return {c.to(dtype).to(held), s.to(dtype).to(held)};
}

at::Tensor rope_long_inv_freq(const RopeConfig& r, std::int64_t head_dim) {
  if (r.type != "longrope") return {};
  RopeConfig plain = r;
  plain.type = "default";
  return rope_inv_freq(plain, head_dim) / at::tensor(r.long_factor, at::kDouble).to(at::kFloat);
}

}  // namespace ctune::model
