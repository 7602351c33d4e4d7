// quantized_linear: forward equals x · W_deqᵀ + b in the compute dtype, backward's grad_x passes a
// finite-difference check in fp64, and the autograd node saves no tensor (only the weight
// reference), so neither the activation nor a dequantised weight outlives the forward.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "quant/quantized_linear.h"
#include "margins.h"

namespace ctune::quant {
namespace {

using ctune::test::within;

at::Tensor randn(std::vector<std::int64_t> shape, std::uint64_t seed, at::ScalarType dtype = at::kFloat) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::kDouble).to(dtype);
}

std::shared_ptr<const QuantizedWeight> make_weight(QuantSpec::Kind kind, Int8Kernel kernel = Int8Kernel::Dequantize) {
  QuantSpec spec;
  spec.kind = kind;
  spec.int8_kernel = kernel;
  return std::make_shared<const QuantizedWeight>(quantize_weight(randn({16, 24}, 11) * 0.2, spec));
}

class QuantizedLinearKinds : public ::testing::TestWithParam<QuantSpec::Kind> {};

TEST_P(QuantizedLinearKinds, FiniteDifferenceGradientInFp64) {
  auto w = make_weight(GetParam());
  auto bias = randn({16}, 12, at::kDouble);
  auto x = randn({3, 5, 24}, 13, at::kDouble).requires_grad_(true);
  auto r = randn({3, 5, 16}, 14, at::kDouble);  // loss = Σ r ⊙ y
  auto loss = [&](const at::Tensor& input) {
    return (quantized_linear(input, w, bias, at::kDouble) * r).sum();
  };
  auto grad = torch::autograd::grad({loss(x)}, {x})[0];
  // Against the dequantised weight: grad_x = r · W_deq exactly (up to summation order).
  auto expected = at::matmul(r, w->dequantize(at::kDouble));
  // fp64 products of length 16 with |r W| ~ 1: a summation order apart, ~1e-15.
  EXPECT_TRUE(within("|grad_x - r W_deq|", (grad - expected).abs().max().item<double>(), 1e-12));
  // Central differences on every 7th input element.
  at::NoGradGuard no_grad;
  auto xd = x.detach().clone();
  auto flat = xd.view(-1);
  const double eps = 1e-6;
  double worst = 0;
  for (std::int64_t i = 0; i < flat.numel(); i += 7) {
    const double saved = flat[i].item<double>();
    flat[i] = saved + eps;
    const double up = loss(xd).item<double>();
    flat[i] = saved - eps;
    const double down = loss(xd).item<double>();
    flat[i] = saved;
    worst = std::max(worst, std::abs((up - down) / (2 * eps) - grad.view(-1)[i].item<double>()));
  }
  // The loss is linear in x, so central differences have no truncation error; their rounding
  // error is ~ u64 |loss| / eps ~ 1e-16 * 10 / 1e-6 = 1e-9.
  EXPECT_TRUE(within("max |finite difference - grad_x|", worst, 1e-7));
}

TEST_P(QuantizedLinearKinds, SavesOnlyTheWeightReference) {
  auto w = make_weight(GetParam());
  const auto refs_before = w.use_count();
  auto x = randn({4, 24}, 15).requires_grad_(true);
  auto y = quantized_linear(x, w, at::Tensor(), at::kBFloat16);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  auto saved = detail::saved_for_backward(y);
  EXPECT_EQ(saved.tensors, 0u);
  EXPECT_EQ(saved.keys, (std::vector<std::string>{"compute_dtype", "weight", "x_dtype"}));
  EXPECT_EQ(saved.weight, w.get());
  EXPECT_EQ(w.use_count(), refs_before + 1);  // the node holds the weight
  y.sum().backward();
  EXPECT_EQ(x.grad().scalar_type(), at::kFloat);  // grad in x's dtype
  y = at::Tensor();
  EXPECT_EQ(w.use_count(), refs_before);  // released with the graph
}

TEST_P(QuantizedLinearKinds, Fp16OnCpuIsFp32GemmOfFp16Inputs) {
  auto w = make_weight(GetParam());
  auto bias = randn({16}, 16);
  auto x = randn({6, 24}, 17);
  auto y = quantized_linear(x, w, bias, at::kHalf);
  ASSERT_EQ(y.scalar_type(), at::kHalf);
  auto mm = at::mm(x.to(at::kHalf).to(at::kFloat), w->dequantize(at::kHalf).to(at::kFloat).t()).to(at::kHalf);
  auto expected = mm + bias.to(at::kHalf);
  EXPECT_TRUE(at::equal(y, expected));
}

INSTANTIATE_TEST_SUITE_P(Kinds, QuantizedLinearKinds, ::testing::Values(QuantSpec::Int8, QuantSpec::Nf4),
                         [](const auto& info) { return info.param == QuantSpec::Int8 ? "int8" : "nf4"; });

TEST(QuantizedLinear, Int8GemmKernelForwardAndBackward) {
  if (!int8_gemm_available()) GTEST_SKIP() << int8_gemm_unavailable_reason();
  auto w = make_weight(QuantSpec::Int8, Int8Kernel::Int8Gemm);
  auto x = randn({2, 5, 24}, 18).requires_grad_(true);
  auto y = quantized_linear(x, w, at::Tensor(), at::kFloat);
  auto expected = int8_matmul(x.detach(), *w->int8, 6.0, Int8Kernel::Int8Gemm);
  EXPECT_TRUE(at::allclose(y, expected, 0, 0));
  // Activation quantisation only perturbs the forward slightly against the dequantised weight.
  // Activation quantisation only perturbs the forward: each x rounds to a step of its row's
  // absmax / 127, so |y - x W_deq^T| <= absmax(x_row) / 254 · Σ_k |W_deq[j, k]| (no outliers
  // here: |x| < 6), plus fp32 rounding.
  auto dense = at::matmul(x.detach(), w->dequantize(at::kFloat).t());
  auto rows = std::get<0>(x.detach().abs().max(-1, /*keepdim=*/true));
  auto bound = rows / 254.0 * w->dequantize(at::kFloat).abs().sum(1) + 1e-5;
  EXPECT_TRUE(within("|y - x W_deq^T| / activation rounding bound", ((y - dense).abs() / bound).max().item<double>(), 1.0));
  y.sum().backward();
  auto expected_grad = at::ones({2, 5, 16}).matmul(w->dequantize(at::kFloat));
  // Backward multiplies by the dequantised weight in fp32: sums of 16 terms of size ~0.2, a
  // summation order apart (~1e-7).
  EXPECT_TRUE(within("max |grad_x - 1 W_deq|", (x.grad() - expected_grad).abs().max().item<double>(), 1e-5));
  EXPECT_GT(w->int8->packed_bytes(), 0);
}

TEST(QuantizedLinear, NoGraphWhenInputDoesNotRequireGrad) {
  auto w = make_weight(QuantSpec::Nf4);
  auto y = quantized_linear(randn({2, 24}, 19), w, at::Tensor(), at::kFloat);
  EXPECT_FALSE(y.requires_grad());
}

}  // namespace
}  // namespace ctune::quant
