#include "quant/dynamic_map.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "quant/codebook.h"

namespace ctune::quant {

namespace {

std::vector<float> build_dynamic_map() {
  constexpr int kExponentBits = 7;  // max_exponent_bits; total_bits 8 leaves 7 non-sign bits
  std::vector<float> data;
  for (int i = 0; i < kExponentBits; ++i) {
    // Signed map: 2^i + 1 boundaries in [0.1, 1] (fp32 linspace), their midpoints (fp32),
    // scaled by 10^(i - 6) in fp32, added with both signs.
    auto bounds = at::linspace(0.1, 1.0, (1 << i) + 1, at::kFloat);
    auto means = (bounds.narrow(0, 0, bounds.size(0) - 1) + bounds.narrow(0, 1, bounds.size(0) - 1)) / 2.0;
    const double scale = std::pow(10.0, i - (kExponentBits - 1));
    auto pos = (means * scale).contiguous();
    auto neg = (means * -scale).contiguous();
    data.insert(data.end(), pos.data_ptr<float>(), pos.data_ptr<float>() + pos.numel());
    data.insert(data.end(), neg.data_ptr<float>(), neg.data_ptr<float>() + neg.numel());
  }
  // 2^(7-7) - 1 = 0 additional items for these parameters.
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  TORCH_CHECK(data.size() == 256, "dynamic map: built ", data.size(), " levels, expected 256");
  return data;
}

const detail::Codebook& codebook() {
  static const detail::Codebook book(build_dynamic_map());
  return book;
}

}  // namespace

const std::vector<float>& dynamic_map() { return codebook().levels(); }

Blockwise8 quantize_blockwise8(const at::Tensor& x, std::int64_t blocksize) {
  TORCH_CHECK(x.dim() == 1 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "quantize_blockwise8: x must be contiguous fp32 [n], found ", x.scalar_type(), " ", x.sizes());
  TORCH_CHECK(blocksize > 0, "quantize_blockwise8: blocksize must be positive, found ", blocksize);
  const std::int64_t n = x.numel(), blocks = (n + blocksize - 1) / blocksize;
  Blockwise8 q{at::empty({n}, at::kByte), at::empty({blocks}, at::kFloat)};
  const float* in = x.data_ptr<float>();
  std::uint8_t* codes = q.codes.data_ptr<std::uint8_t>();
  float* absmax = q.absmax.data_ptr<float>();
  const auto& book = codebook();
  at::parallel_for(0, blocks, 16, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t begin = b * blocksize, end = std::min(n, begin + blocksize);
      float amax = 0.0f;
      for (std::int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(in[i]));
      absmax[b] = amax;
      const float inv = amax > 0.0f ? 1.0f / amax : 0.0f;  // multiply by the fp32 reciprocal
      for (std::int64_t i = begin; i < end; ++i) {
        codes[i] = book.encode(std::clamp(in[i] * inv, -1.0f, 1.0f));
      }
    }
  });
  return q;
}

at::Tensor dequantize_blockwise8(const Blockwise8& q, std::int64_t blocksize) {
  const std::int64_t n = q.codes.numel();
  auto out = at::empty({n}, at::kFloat);
  const std::uint8_t* codes = q.codes.data_ptr<std::uint8_t>();
  const float* absmax = q.absmax.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const auto& book = codebook();
  for (std::int64_t i = 0; i < n; ++i) o[i] = book.level(codes[i]) * absmax[i / blocksize];
  return out;
}

}  // namespace ctune::quant
