#include "quant/mxfp4.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <sstream>

#include "core/error.h"

namespace ctune::quant {

namespace {

std::string shape_text(at::IntArrayRef s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

// One expert: [B, G, 16] bytes and [B, G] scales -> [B, 32 G] fp32, row by row.
void dequantize_expert(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t rows, std::int64_t groups, float* out) {
  at::parallel_for(0, rows * groups, 256, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      // ldexp is exact here: a value of at most 2 significant bits times a power of two.
      const int exponent = static_cast<int>(scales[i]) - 127;
      const std::uint8_t* b = blocks + i * 16;
      float* o = out + i * 32;
      for (int j = 0; j < 16; ++j) {
        o[2 * j] = std::ldexp(e2m1_value(b[j] & 0x0F), exponent);
        o[2 * j + 1] = std::ldexp(e2m1_value(b[j] >> 4), exponent);
      }
    }
  });
}

}  // namespace

float e2m1_value(int nibble) {
  static constexpr float kValues[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[nibble & 0x0F];
}

at::Tensor dequantize_mxfp4(const at::Tensor& blocks_in, const at::Tensor& scales_in, at::ScalarType dtype, const std::string& name) {
  if (blocks_in.dim() != 4 || blocks_in.size(3) != 16 || blocks_in.scalar_type() != at::kByte) {
    throw ShapeError(name + "_blocks: MXFP4 blocks must be uint8 [experts, rows, groups, 16], found " +
                     std::string(c10::toString(blocks_in.scalar_type())) + " " + shape_text(blocks_in.sizes()));
  }
  if (scales_in.sizes() != blocks_in.sizes().slice(0, 3) || scales_in.scalar_type() != at::kByte) {
    throw ShapeError(name + "_scales: expected uint8 " + shape_text(blocks_in.sizes().slice(0, 3)) + " (one scale per 32 values of " +
                     name + "_blocks " + shape_text(blocks_in.sizes()) + "), found " +
                     std::string(c10::toString(scales_in.scalar_type())) + " " + shape_text(scales_in.sizes()));
  }
  const auto blocks = blocks_in.contiguous(), scales = scales_in.contiguous();
  const auto E = blocks.size(0), B = blocks.size(1), G = blocks.size(2);
  auto out = at::empty({E, G * 32, B}, at::TensorOptions().dtype(dtype));
  auto expert = at::empty({B, G * 32}, at::TensorOptions().dtype(at::kFloat));  // one expert at a time: bounded scratch
  for (std::int64_t e = 0; e < E; ++e) {
    dequantize_expert(blocks[e].data_ptr<std::uint8_t>(), scales[e].data_ptr<std::uint8_t>(), B, G, expert.data_ptr<float>());
    out[e].copy_(expert.t());
  }
  return out;
}

}  // namespace ctune::quant
