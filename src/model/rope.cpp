#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace ctune::model {

namespace {

// transformers' _compute_yarn_parameters, step for step (the same fp32 tensor operations, the
// correction range in double as Python computes it): the dimensions that rotate fewer than
// beta_slow times over the original context are interpolated (divided by factor), those that
// rotate more than beta_fast times kept, and a linear ramp over the dimension index blends the
// ones between.
at::Tensor yarn_inv_freq(const RopeConfig& r, std::int64_t d) {
  const auto fp32 = at::TensorOptions().dtype(at::kFloat);
  const auto pos_freqs = at::pow(r.theta, at::arange(0, d, 2, fp32) / static_cast<double>(d));
  const auto extrapolation = 1.0 / pos_freqs;
  const auto interpolation = 1.0 / (r.factor * pos_freqs);
  const double dim = static_cast<double>(d), original = static_cast<double>(r.original_max_position);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(r.theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // as transformers: no division by zero
  const auto ramp = at::clamp((at::arange(d / 2, fp32) - low) / (high - low), 0, 1);
  const auto extrapolation_factor = 1 - ramp;
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

}  // namespace

at::Tensor rope_inv_freq(const ModelConfig& config) { return rope_inv_freq(config.rope, config.head_dim); }

at::Tensor rope_inv_freq(const RopeConfig& r, std::int64_t head_dim) {
  const auto d = r.rotary_dim(head_dim);  // partial rotary: only the leading dimensions rotate
  if (r.type == "yarn") return yarn_inv_freq(r, d);
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
