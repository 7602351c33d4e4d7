// ggml element types: sizes and the scalar conversions. The F16 conversion is done on the bit
// pattern (round to nearest, ties to even; overflow to infinity; subnormals kept), which is what
// the F16C instruction ggml uses computes. BF16 and Q8_0 follow ggml's reference code exactly:
// BF16 adds 0x7fff plus the lowest kept bit before truncating (NaN kept quiet); Q8_0 computes
// d = amax / 127 and id = 1 / d in float, stores d as F16 and q = roundf(x * id) (ties away
// from zero).
#include "io/gguf_types.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace ctune::io {

std::optional<GgmlType> ggml_type_from_id(std::uint32_t id) {
  switch (id) {
    case 0: return GgmlType::F32;
    case 1: return GgmlType::F16;
    case 8: return GgmlType::Q8_0;
    case 24: return GgmlType::I8;
    case 25: return GgmlType::I16;
    case 26: return GgmlType::I32;
    case 27: return GgmlType::I64;
    case 28: return GgmlType::F64;
    case 30: return GgmlType::BF16;
    default: return std::nullopt;
  }
}

const char* ggml_type_name(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return "F32";
    case GgmlType::F16: return "F16";
    case GgmlType::Q8_0: return "Q8_0";
    case GgmlType::I8: return "I8";
    case GgmlType::I16: return "I16";
    case GgmlType::I32: return "I32";
    case GgmlType::I64: return "I64";
    case GgmlType::F64: return "F64";
    case GgmlType::BF16: return "BF16";
  }
  return "?";
}

std::size_t ggml_block_size(GgmlType type) {
  return type == GgmlType::Q8_0 ? kQ8BlockSize : 1;
}

std::size_t ggml_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return kQ8BlockBytes;
    case GgmlType::I8: return 1;
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::I16: return 2;
    case GgmlType::F32:
    case GgmlType::I32: return 4;
    case GgmlType::I64:
    case GgmlType::F64: return 8;
  }
  return 0;
}

std::uint64_t ggml_nbytes(GgmlType type, std::uint64_t numel) {
  return numel / ggml_block_size(type) * ggml_block_bytes(type);
}

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Rounds `value >> shift` to nearest, ties to even.
std::uint32_t shift_round_even(std::uint32_t value, int shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t rest = value & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
}

void put_u16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v & 0xff);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}

std::uint16_t get_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

}  // namespace

std::uint16_t fp32_to_fp16(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000);
  const std::uint32_t a = u & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;   // NaN, kept quiet
  if (a >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds to infinity
  if (a < 0x38800000) {                       // below 2^-14: a half subnormal (or zero)
    if (a <= 0x33000000) return sign;         // <= 2^-25: rounds to zero (the tie goes to even 0)
    const std::uint32_t exponent = a >> 23;
    const std::uint32_t mantissa = (a & 0x7fffff) | 0x800000;
    // value = mantissa * 2^(exponent - 150); in units of 2^-24 that is mantissa >> (126 - exponent).
    return sign | static_cast<std::uint16_t>(shift_round_even(mantissa, static_cast<int>(126 - exponent)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits; a carry
  // out of the mantissa correctly bumps the exponent.
  const std::uint32_t rebased = a - (112u << 23);
  return sign | static_cast<std::uint16_t>(shift_round_even(rebased, 13));
}

float fp16_to_fp32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1f;
  const std::uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return float_of(sign | 0x7f800000 | (mantissa << 13));
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t fp32_to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<std::uint16_t>((u >> 16) | 64);
  return static_cast<std::uint16_t>((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

float bf16_to_fp32(std::uint16_t h) {
  return float_of(static_cast<std::uint32_t>(h) << 16);
}

std::vector<std::uint8_t> encode_ggml(GgmlType type, const float* values, std::size_t n) {
  std::vector<std::uint8_t> out;
  switch (type) {
    case GgmlType::F32:
      out.resize(n * 4);
      if (n) std::memcpy(out.data(), values, n * 4);
      return out;
    case GgmlType::F16:
    case GgmlType::BF16:
      out.resize(n * 2);
      for (std::size_t i = 0; i < n; ++i)
        put_u16(&out[2 * i], type == GgmlType::F16 ? fp32_to_fp16(values[i]) : fp32_to_bf16(values[i]));
      return out;
    case GgmlType::Q8_0: {
      if (n % kQ8BlockSize != 0)
        throw ShapeError("Q8_0: " + std::to_string(n) + " values are not a whole number of 32-value blocks");
      out.resize(n / kQ8BlockSize * kQ8BlockBytes);
      for (std::size_t b = 0; b < n / kQ8BlockSize; ++b) {
        const float* x = values + b * kQ8BlockSize;
        std::uint8_t* y = out.data() + b * kQ8BlockBytes;
        float amax = 0.0f;
        for (std::size_t j = 0; j < kQ8BlockSize; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        put_u16(y, fp32_to_fp16(d));
        for (std::size_t j = 0; j < kQ8BlockSize; ++j) {
          y[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::roundf(x[j] * id)));
        }
      }
      return out;
    }
    default:
      throw UnsupportedError(std::string("encoding tensors as ") + ggml_type_name(type) + " is not supported");
  }
}

std::vector<float> decode_ggml(GgmlType type, const std::uint8_t* bytes, std::size_t n, const std::string& where) {
  std::vector<float> out(n);
  switch (type) {
    case GgmlType::F32:
      if (n) std::memcpy(out.data(), bytes, n * 4);
      return out;
    case GgmlType::F16:
      for (std::size_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(get_u16(bytes + 2 * i));
      return out;
    case GgmlType::BF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(get_u16(bytes + 2 * i));
      return out;
    case GgmlType::Q8_0:
      if (n % kQ8BlockSize != 0)
        throw FormatError(where + ": Q8_0 tensor of " + std::to_string(n) + " values is not a whole number of blocks");
      for (std::size_t b = 0; b < n / kQ8BlockSize; ++b) {
        const std::uint8_t* y = bytes + b * kQ8BlockBytes;
        const float d = fp16_to_fp32(get_u16(y));
        for (std::size_t j = 0; j < kQ8BlockSize; ++j)
          out[b * kQ8BlockSize + j] = d * static_cast<float>(static_cast<std::int8_t>(y[2 + j]));
      }
      return out;
    default:
      throw UnsupportedError(where + ": reading " + ggml_type_name(type) + " tensors as floats is not supported");
  }
}

}  // namespace ctune::io
