// The GGUF container (torch-free): what the writer lays down byte by byte, what the reader hands
// back (metadata keys with their types, tensor names, dims, offsets, alignment), and the element
// encodings against their definitions: every F16 bit pattern round-trips, BF16 rounds to nearest
// even, and Q8_0 blocks equal ggml's formula (d = amax/127 as F16, q = roundf(x * (1/d))).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace ctune::io {
namespace {

std::uint32_t u32_at(const std::vector<std::uint8_t>& b, std::size_t pos) {
  std::uint32_t v;
  std::memcpy(&v, b.data() + pos, 4);
  return v;
}
std::uint64_t u64_at(const std::vector<std::uint8_t>& b, std::size_t pos) {
  std::uint64_t v;
  std::memcpy(&v, b.data() + pos, 8);
  return v;
}

std::vector<std::uint8_t> bytes_of(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A small file: every metadata type, an F32 matrix, an F32 vector and a Q8_0 matrix.
GgufWriter sample_writer() {
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("test.u32", GgufValue::u32(4000000000u));
  w.set("test.i32", GgufValue::i32(-7));
  w.set("test.u64", GgufValue::u64(1ull << 40));
  w.set("test.f32", GgufValue::f32(0.5f));
  w.set("test.f64", GgufValue::f64(-2.25));
  w.set("test.bool", GgufValue::boolean(true));
  w.set("test.u8", GgufValue::from_bytes(GgufValueType::UINT8, false, {200}, 1));
  w.set("test.strings", GgufValue::strings({"a", "", "ünï"}));
  w.set("test.f32s", GgufValue::f32_array({1.5f, -2.0f}));
  w.set("test.i32s", GgufValue::i32_array({3, -4, 5}));
  std::vector<float> m(3 * 5), v(7), q(2 * 64);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = -static_cast<float>(i);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(static_cast<float>(i));
  w.add_tensor("m.weight", GgmlType::F32, {5, 3}, [m] { return bytes_of(m); });
  w.add_tensor("v.weight", GgmlType::F32, {7}, [v] { return bytes_of(v); });
  w.add_tensor("q.weight", GgmlType::Q8_0, {64, 2}, [q] { return encode_ggml(GgmlType::Q8_0, q.data(), q.size()); });
  return w;
}

TEST(GgufContainer, HeaderBytesFollowTheSpec) {
  const auto b = sample_writer().to_bytes();
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "GGUF");
  EXPECT_EQ(u32_at(b, 4), 3u);        // version
  EXPECT_EQ(u64_at(b, 8), 3u);        // tensors
  EXPECT_EQ(u64_at(b, 16), 12u);      // KVs, general.alignment included
  EXPECT_EQ(u64_at(b, 24), 17u);      // first key length
  EXPECT_EQ(std::string(b.begin() + 32, b.begin() + 49), "general.alignment");
  EXPECT_EQ(u32_at(b, 49), 4u);       // UINT32
  EXPECT_EQ(u32_at(b, 53), 32u);      // the alignment value
  EXPECT_EQ(b.size() % 32, 0u);       // every tensor, the last too, is padded
}

TEST(GgufContainer, ReaderReturnsKeysTypesTensorsAndOffsets) {
  const auto b = sample_writer().to_bytes();
  const GgufHeader h = parse_gguf(b.data(), b.size(), "sample.gguf");
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 32u);
  ASSERT_EQ(h.kvs.size(), 12u);
  EXPECT_EQ(h.kvs[0].first, "general.alignment");
  EXPECT_EQ(h.kvs[1].first, "general.architecture");
  const std::string w = "test";
  EXPECT_EQ(h.require("test.u32", w).type(), GgufValueType::UINT32);
  EXPECT_EQ(h.require("test.u32", w).as_int(w), 4000000000ll);
  EXPECT_EQ(h.require("test.i32", w).as_int(w), -7);
  EXPECT_EQ(h.require("test.u64", w).type(), GgufValueType::UINT64);
  EXPECT_EQ(h.require("test.u64", w).as_int(w), 1ll << 40);
  EXPECT_EQ(h.require("test.f32", w).type(), GgufValueType::FLOAT32);
  EXPECT_EQ(h.require("test.f32", w).as_float(w), 0.5);
  EXPECT_EQ(h.require("test.f64", w).as_float(w), -2.25);
  EXPECT_TRUE(h.require("test.bool", w).as_bool(w));
  EXPECT_EQ(h.require("test.u8", w).as_int(w), 200);
  EXPECT_EQ(h.require("test.strings", w).string_array(w), (std::vector<std::string>{"a", "", "ünï"}));
  EXPECT_EQ(h.require("test.f32s", w).describe(), "[f32 x 2]");
  EXPECT_EQ(h.require("test.f32s", w).float_at(1, w), -2.0);
  EXPECT_EQ(h.require("test.i32s", w).int_at(1, w), -4);
  EXPECT_EQ(h.require("general.architecture", w).as_string(w), "llama");
  EXPECT_THROW(h.require("test.f32", w).as_string(w), FormatError);
  EXPECT_THROW(h.require("test.i32s", w).as_int(w), FormatError);  // an array, not a scalar
  EXPECT_THROW(h.require("missing.key", w), FormatError);

  ASSERT_EQ(h.tensors.size(), 3u);
  const GgufTensorInfo& m = h.tensors[0];
  EXPECT_EQ(m.name, "m.weight");
  EXPECT_EQ(m.ne, (std::vector<std::int64_t>{5, 3}));
  EXPECT_EQ(m.shape(), (std::vector<std::int64_t>{3, 5}));  // PyTorch order: reversed
  EXPECT_EQ(m.offset, 0u);
  EXPECT_EQ(m.nbytes, 60u);
  EXPECT_EQ(h.tensors[1].offset, 64u);   // 60 rounded up to 32
  EXPECT_EQ(h.tensors[2].offset, 96u);   // 64 + 28 -> 96
  EXPECT_EQ(h.tensors[2].type, GgmlType::Q8_0);
  EXPECT_EQ(h.tensors[2].nbytes, 4u * 34u);  // 2 rows x 2 blocks x 34 bytes
  EXPECT_EQ(h.data_start % 32, 0u);
  for (const auto& t : h.tensors) EXPECT_EQ(t.offset % 32, 0u) << t.name;

  float first;
  std::memcpy(&first, b.data() + h.data_start + h.tensors[1].offset + 4, 4);
  EXPECT_EQ(first, -1.0f);
  for (std::uint64_t pad = h.data_start + 60; pad < h.data_start + 64; ++pad) EXPECT_EQ(b[pad], 0u);
}

TEST(GgufContainer, FileRoundTripThroughTheMapping) {
  const auto path = std::filesystem::temp_directory_path() / ("ctune-gguf-" + std::to_string(::getpid()) + ".gguf");
  sample_writer().write(path);
  auto f = GgufFile::open(path);
  const auto* v = f->header().find_tensor("v.weight");
  ASSERT_NE(v, nullptr);
  const auto values = f->read_floats(*v);
  ASSERT_EQ(values.size(), 7u);
  EXPECT_EQ(values[6], -6.0f);
  std::filesystem::remove(path);
  EXPECT_THROW(GgufFile::open(path), IoError);
}

TEST(GgufContainer, WriterRefusesBadTensors) {
  GgufWriter w;
  auto none = [] { return std::vector<std::uint8_t>(); };
  EXPECT_THROW(w.add_tensor(std::string(64, 'x'), GgmlType::F32, {1}, none), FormatError);
  EXPECT_THROW(w.add_tensor("q", GgmlType::Q8_0, {48, 2}, none), FormatError);  // 48 % 32 != 0
  EXPECT_THROW(w.add_tensor("five", GgmlType::F32, {1, 1, 1, 1, 1}, none), FormatError);
  w.add_tensor("t", GgmlType::F32, {2}, none);  // produces 0 bytes instead of 8
  EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {2}, none), FormatError);
  EXPECT_THROW(w.to_bytes(), FormatError);
  EXPECT_THROW(w.set("general.alignment", GgufValue::u32(64)), ConfigError);
  EXPECT_THROW(GgufWriter(24), ConfigError);
}

TEST(GgufTypes, EveryF16PatternRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = fp16_to_fp32(half);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), half) << "pattern " << h << " value " << f;
  }
}

TEST(GgufTypes, F16RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // the tie rounds up to infinity
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);            // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);            // tie -> even (zero)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(NAN) & 0x7E00, 0x7E00);
}

TEST(GgufTypes, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -7) + std::ldexp(1.0f, -9)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
}

TEST(GgufTypes, Q8BlocksFollowGgmlFormula) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> x(4 * 32);
  for (auto& v : x) v = normal(gen);
  for (int j = 0; j < 32; ++j) x[64 + j] = 0.0f;                      // an all-zero block: d = 0
  for (int j = 0; j < 32; ++j) x[96 + j] = static_cast<float>(j) - 31;  // amax at a negative value
  const auto bytes = encode_ggml(GgmlType::Q8_0, x.data(), x.size());
  ASSERT_EQ(bytes.size(), 4u * 34u);
  const auto back = decode_ggml(GgmlType::Q8_0, bytes.data(), x.size(), "test");
  // |x - q dd| <= dd / 2 (rounding to the nearest step of the stored scale dd) plus the scale's
  // own f16 rounding, |d - dd| <= 2^-11 d, times |q| <= 127: 127 d 2^-11 = amax 2^-11 ~ 4.9e-4
  // amax. The bound below doubles that term. Elementwise arithmetic, the same on every machine,
  // and the half step is nearly attained by design: a bound, not a tolerance with a margin.
  double worst = 0;
  for (std::size_t b = 0; b < 4; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::uint16_t stored;
    std::memcpy(&stored, &bytes[b * 34], 2);
    EXPECT_EQ(stored, fp32_to_fp16(d)) << "block " << b;
    const float dd = fp16_to_fp32(stored);
    for (int j = 0; j < 32; ++j) {
      const auto q = static_cast<std::int8_t>(bytes[b * 34 + 2 + static_cast<std::size_t>(j)]);
      EXPECT_EQ(q, static_cast<std::int8_t>(std::roundf(x[b * 32 + j] * id))) << "block " << b << " value " << j;
      EXPECT_EQ(back[b * 32 + j], dd * static_cast<float>(q));
      const double bound = dd / 2 + amax * 1e-3f;
      if (bound > 0) worst = std::max(worst, std::fabs(back[b * 32 + j] - x[b * 32 + j]) / bound);
    }
  }
  EXPECT_LE(worst, 1.0) << "|x - decoded| / (half a step + scale rounding)";
  EXPECT_EQ(static_cast<std::int8_t>(bytes[3 * 34 + 2]), -127);  // -31 maps to -127 exactly
  EXPECT_THROW(encode_ggml(GgmlType::Q8_0, x.data(), 33), ShapeError);
}

}  // namespace
}  // namespace ctune::io
