#include "quant/nf4.h"

#include <ATen/core/grad_mode.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "core/error.h"
#include "quant/codebook.h"
#include "quant/dynamic_map.h"
#include "quant/storage_bytes.h"

namespace ctune::quant {

namespace {

constexpr std::uint8_t kZeroCode = 7;

const detail::Codebook& nf4_book() {
  static const detail::Codebook book(std::vector<float>(nf4_levels().begin(), nf4_levels().end()));
  return book;
}

void check_blocksize(std::int64_t blocksize) {
  const bool pow2 = blocksize > 0 && (blocksize & (blocksize - 1)) == 0;
  if (!pow2 || blocksize < 64 || blocksize > 4096) {
    throw ConfigError("nf4 blocksize: expected a power of two in 64..4096, found " + std::to_string(blocksize));
  }
}

}  // namespace

const std::array<float, 16>& nf4_levels() {
  static const std::array<float, 16> levels = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
      0.7229568362236023f, 1.0f};
  return levels;
}

double nf4_max_half_gap() {
  double gap = 0;
  for (std::size_t i = 0; i + 1 < nf4_levels().size(); ++i) gap = std::max(gap, double(nf4_levels()[i + 1]) - nf4_levels()[i]);
  return gap / 2.0;
}

std::int64_t Nf4Weight::bytes() const { return nf4_weight_bytes(numel, blocksize, double_quant); }

at::Tensor Nf4Weight::block_absmax() const {
  if (!double_quant) return absmax;
  return dequantize_blockwise8({qabsmax, nested_absmax}, kNf4NestedBlocksize) + offset;
}

Nf4Weight quantize_nf4(const at::Tensor& w, std::int64_t blocksize, bool double_quant) {
  check_blocksize(blocksize);
  TORCH_CHECK(w.is_floating_point(), "quantize_nf4: weight must be floating point, found ", w.scalar_type());
  at::NoGradGuard no_grad;
  auto flat = w.detach().to(at::kFloat).cpu().contiguous().view(-1);  // row-major flattening
  Nf4Weight q;
  q.shape.assign(w.sizes().begin(), w.sizes().end());
  q.numel = flat.numel();
  q.blocksize = blocksize;
  q.packed = at::empty({(q.numel + 1) / 2}, at::kByte);
  auto absmax = at::empty({q.blocks()}, at::kFloat);

  const float* in = flat.data_ptr<float>();
  std::uint8_t* out = q.packed.data_ptr<std::uint8_t>();
  float* amax_out = absmax.data_ptr<float>();
  const std::int64_t n = q.numel;
  const auto& book = nf4_book();
  at::parallel_for(0, q.blocks(), 64, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t begin = b * blocksize, end = std::min(n, begin + blocksize);
      float amax = 0.0f;
      for (std::int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(in[i]));
      amax_out[b] = amax;
      const float inv = amax > 0.0f ? 1.0f / amax : 0.0f;  // x · fp32 reciprocal, as the CUDA kernel
      // Blocks start at even indices (blocksize is even), so pairs never straddle two blocks.
      for (std::int64_t i = begin; i < end; i += 2) {
        const std::uint8_t hi = book.encode(in[i] * inv);
        const std::uint8_t lo = i + 1 < end ? book.encode(in[i + 1] * inv) : kZeroCode;
        out[i / 2] = static_cast<std::uint8_t>((hi << 4) | lo);
      }
    }
  });

  q.double_quant = double_quant;
  if (!double_quant) {
    q.absmax = absmax;
    return q;
  }
  q.offset = static_cast<float>(absmax.to(at::kDouble).mean().item<double>());
  auto nested = quantize_blockwise8((absmax - q.offset).contiguous(), kNf4NestedBlocksize);
  q.qabsmax = nested.codes;
  q.nested_absmax = nested.absmax;
  return q;
}

at::Tensor dequantize(const Nf4Weight& w, at::ScalarType dtype) {
  TORCH_CHECK(w.packed.device().is_cpu(), "nf4 dequantize: CPU-resident weights only (CUDA dequantisation is not implemented), found ", w.packed.device());
  at::NoGradGuard no_grad;
  auto absmax = w.block_absmax().contiguous();
  auto out = at::empty({w.numel}, at::TensorOptions().dtype(dtype));
  const std::uint8_t* packed = w.packed.data_ptr<std::uint8_t>();
  const float* amax = absmax.data_ptr<float>();
  const auto& levels = nf4_levels();
  const std::int64_t n = w.numel, bs = w.blocksize;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "nf4_dequantize", [&] {
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, w.blocks(), 64, [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t b = b0; b < b1; ++b) {
        const std::int64_t begin = b * bs, end = std::min(n, begin + bs);
        const float a = amax[b];
        // Blocks start at even indices: walk the block's bytes, high nibble first. The
        // product is taken in fp32, then rounded to dtype.
        std::int64_t i = begin;
        for (; i + 1 < end; i += 2) {
          const std::uint8_t byte = packed[i / 2];
          o[i] = static_cast<scalar_t>(levels[byte >> 4] * a);
          o[i + 1] = static_cast<scalar_t>(levels[byte & 0x0F] * a);
        }
        if (i < end) o[i] = static_cast<scalar_t>(levels[packed[i / 2] >> 4] * a);
      }
    });
  });
  return out.view(w.shape);
}

}  // namespace ctune::quant
