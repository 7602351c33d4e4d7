// ctune's int8 / NF4 / double quantisation against make_quant_reference.py, an independent
// numpy implementation of docs/formats.md#quantisation-bitsandbytes: codes, scales and packed bytes must be equal
// exactly; dequantised values and LLM.int8 matmul outputs within the tolerances stated below.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include <cstdio>
#include <map>
#include <string>

#include "io/safetensors.h"
#include "io/tensor_io.h"
#include "quant/dynamic_map.h"
#include "quant/int8.h"
#include "quant/nf4.h"
#include "margins.h"

namespace ctune::quant {
namespace {

using ctune::test::within;

// max over elements of diff / bound, where 0 / 0 counts as 0 (exact zeros: all-zero rows).
double ratio(const at::Tensor& diff, const at::Tensor& bound) {
  return at::nan_to_num(diff / bound, 0.0, INFINITY, INFINITY).max().item<double>();
}

const std::map<std::string, at::Tensor>& reference() {
  static const auto tensors = [] {
    std::map<std::string, at::Tensor> out;
    auto file = io::SafetensorsFile::open(std::string(CTUNE_TEST_DATA_DIR) + "/quant-reference/quant_reference.safetensors");
    for (const auto& t : file->header().tensors) out[t.name] = io::load_tensor(*file, t, std::nullopt).clone();
    return out;
  }();
  return tensors;
}

const at::Tensor& fixture(const std::string& name) {
  auto it = reference().find(name);
  if (it == reference().end()) throw std::runtime_error("missing reference tensor " + name);
  return it->second;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST(QuantReference, DynamicMapEqualsBitsandbytesConstruction) {
  auto expected = fixture("dynamic_map");
  ASSERT_EQ(expected.numel(), 256);
  auto mine = at::tensor(dynamic_map());
  EXPECT_TRUE(at::equal(mine, expected)) << "max diff " << max_abs_diff(mine, expected);
  EXPECT_EQ(dynamic_map().back(), 1.0f);
  EXPECT_FLOAT_EQ(dynamic_map().front(), -0.99296875f);
}

TEST(QuantReference, Int8CodesAndScalesExact) {
  auto q = quantize_int8(fixture("int8.w"));
  EXPECT_TRUE(at::equal(q.cb, fixture("int8.cb")));
  EXPECT_TRUE(at::equal(q.scb, fixture("int8.scb")));
  // Dequantised: cb · scb / 127 in fp32 on both sides, elementwise (no reduction, so the same on
  // every CPU); the order of the product and the division may differ: 1 ulp (2^-23) of the row scale.
  auto deq = dequantize(q, at::kFloat);
  auto scale = (fixture("int8.scb").unsqueeze(1).to(at::kDouble) * 1.2e-7).expand_as(deq);
  EXPECT_TRUE(within("|deq - reference| / (1 ulp of the row scale)",
                     ratio((deq - fixture("int8.deq")).abs().to(at::kDouble), scale), 1.0));
}

// LLM.int8 with the int8 GEMM: y within 1e-5·(1 + |y|) of the float64 reference (fp32 scaling
// in a different order is the only difference; the int32 accumulation is exact).
TEST(QuantReference, Int8GemmMatchesLlmInt8) {
  if (!int8_gemm_available()) GTEST_SKIP() << int8_gemm_unavailable_reason();
  auto q = quantize_int8(fixture("int8.w"));
  for (auto [threshold, name] : {std::pair{6.0, "int8.y_t6"}, std::pair{0.0, "int8.y_t0"}}) {
    auto y = int8_matmul(fixture("int8.x"), q, threshold, Int8Kernel::Int8Gemm);
    const auto& expected = fixture(name);
    ASSERT_EQ(y.sizes(), expected.sizes());
    // The int32 accumulation is exact; the fp32 scaling (two products, a division) and the fp32
    // outlier product (a few columns) round at most ~1e-6 relative: 1e-5 (1 + |y|) leaves 10x.
    const double ratio = ((y - expected).abs().to(at::kDouble) / ((expected.abs().to(at::kDouble) + 1) * 1e-5)).max().item<double>();
    EXPECT_TRUE(within(std::string(name) + ": |y - reference| / (1e-5 (1 + |y|))", ratio, 1.0));
  }
  // The outlier decomposition matters: with threshold 6 the outlier columns are exact in fp32.
  EXPECT_TRUE(ctune::test::beyond("threshold 6 vs 0: max |dy|", max_abs_diff(fixture("int8.y_t6"), fixture("int8.y_t0")), 1e-3));
}

// The Dequantize kernel does not quantise activations: it equals x · W_deqᵀ, and differs from
// LLM.int8 by at most the activation rounding, rs/254 · Σ_k |W_deq[j, k]| per element.
TEST(QuantReference, Int8DequantizeKernelWithinActivationRoundingOfLlmInt8) {
  auto q = quantize_int8(fixture("int8.w"));
  const auto& x = fixture("int8.x");
  auto y = int8_matmul(x, q, 6.0, Int8Kernel::Dequantize);
  auto exact = at::matmul(x.to(at::kDouble), dequantize(q, at::kDouble).t());
  // An fp32 GEMM of length n: |error| <= n u Σ_k |x_k| |W_jk| (the classic dot-product bound).
  const auto n = static_cast<double>(x.size(-1));
  auto gemm_bound = at::matmul(x.abs().to(at::kDouble), dequantize(q, at::kDouble).abs().t()) * n * ctune::test::kUnitRoundoffFp32;
  EXPECT_TRUE(within("|y - x W_deq^T| / (n u sum |x||W|)", ratio((y.to(at::kDouble) - exact).abs(), gemm_bound), 1.0));
  auto xz = x.masked_fill(x.abs() >= 6.0, 0.0);
  auto rs = std::get<0>(xz.abs().max(1)).to(at::kDouble);
  auto bound = rs.unsqueeze(1) / 254.0 * dequantize(q, at::kDouble).abs().sum(1).unsqueeze(0) + gemm_bound;
  EXPECT_TRUE(within("|y - LLM.int8 y| / (activation rounding bound)",
                     ratio((y.to(at::kDouble) - fixture("int8.y_t6").to(at::kDouble)).abs(), bound), 1.0));
}

struct Nf4Case {
  const char* name;
  std::int64_t blocksize;
  bool double_quant;
};

class QuantReferenceNf4 : public ::testing::TestWithParam<Nf4Case> {};

TEST_P(QuantReferenceNf4, PackedBytesScalesAndValues) {
  const auto c = GetParam();
  const std::string p = std::string(c.name) + ".";
  auto q = quantize_nf4(fixture(p + "w"), c.blocksize, c.double_quant);
  EXPECT_TRUE(at::equal(q.packed, fixture(p + "packed"))) << "packed codes differ";
  if (!c.double_quant) {
    EXPECT_TRUE(at::equal(q.absmax, fixture(p + "absmax")));
  } else {
    EXPECT_TRUE(at::equal(q.qabsmax, fixture(p + "qabsmax"))) << "double-quant codes differ";
    EXPECT_TRUE(at::equal(q.nested_absmax, fixture(p + "nested_absmax")));
    EXPECT_EQ(q.offset, fixture(p + "offset").item<float>());
  }
  // Dequantised in fp32: level · absmax on both sides, elementwise (the same on every CPU);
  // tolerance about 1 ulp (2^-23) of the largest absmax.
  auto deq = dequantize(q, at::kFloat);
  const double tol = 1e-7 * q.block_absmax().abs().max().item<double>();
  EXPECT_TRUE(within(std::string(c.name) + ": max |deq - reference|", max_abs_diff(deq, fixture(p + "deq")), tol));
}

INSTANTIATE_TEST_SUITE_P(Cases, QuantReferenceNf4,
                         ::testing::Values(Nf4Case{"nf4_a", 64, false}, Nf4Case{"nf4_b", 64, false},
                                           Nf4Case{"nf4_c", 64, true}, Nf4Case{"nf4_d", 64, true},
                                           Nf4Case{"nf4_e", 128, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ctune::quant
