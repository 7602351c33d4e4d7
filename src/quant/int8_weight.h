// The stored form of an LLM.int8() weight (quant/int8.h): int8 codes and per-row absmax, with
// the slot for the int8 GEMM's prepacked copy (quant/int8_gemm.h). Apart from both, so that the
// kernels and the format they read do not include each other.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

namespace ctune::quant {

namespace detail {
struct PackedInt8;  // oneDNN-prepacked weight, built lazily (int8_gemm.h)
}

struct Int8Weight {
  at::Tensor cb;   // int8 [out, in]: round(w · (127 / scb)) per row, half to even
  at::Tensor scb;  // fp32 [out]: row absmax of w (0 for an all-zero row, whose cb is 0)
  std::shared_ptr<detail::PackedInt8> packed;  // shared by copies; built on the first Int8Gemm call

  std::int64_t out_features() const { return cb.size(0); }
  std::int64_t in_features() const { return cb.size(1); }
  // Stored bytes: out·in + 4·out (the format; excludes the Int8Gemm prepack, see packed_bytes()).
  std::int64_t bytes() const;
  // Extra bytes held by the oneDNN prepacked weight if it has been built (0 otherwise).
  std::int64_t packed_bytes() const;
};

}  // namespace ctune::quant
