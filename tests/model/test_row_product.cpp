// One row times a weight on the caller and a pool of workers (ops/row_product.h): the sums
// against float64 on every instruction-set table, and a worker that stalls in the middle of its
// chunks (a thread the scheduler took off its core) neither changes a bit of the result nor is
// waited for: the caller takes its chunks back.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <string>

#include "margins.h"
#include "ops/compute.h"
#include "ops/cpu_kernels.h"
#include "ops/row_product.h"

namespace ctune {
namespace {

using test::kUnitRoundoffFp32;

// The pool runs only with more than one intra-op thread.
struct TwoThreads {
  TwoThreads() : previous(at::get_num_threads()) { at::set_num_threads(2); }
  ~TwoThreads() { at::set_num_threads(previous); }
  int previous;
};

// Each output is kDotLanes running sums of K / 32 products, a five-level tree, then the tail of
// up to 31 products: at most K / 32 + 5 + 31 additions on any path, each relative u, plus one
// rounding per product (fp32 x times a weight widened exactly from bf16 or fp32). So
// |y - exact| <= (K / 32 + 37) u Σ_k |w_k x_k|, with the float64 evaluation of the same rounded
// inputs standing for exact (its own error is 2^-29 times smaller).
void expect_within_the_sum_bound(const at::Tensor& y, const at::Tensor& w, const at::Tensor& x, const std::string& what) {
  const auto w64 = w.to(at::kDouble), x64 = x.to(at::kDouble);
  const auto exact = at::mv(w64, x64);
  const auto magnitude = at::mv(w64.abs(), x64.abs());
  const double steps = static_cast<double>(w.size(1)) / 32 + 37;
  const auto excess = (y.to(at::kDouble) - exact).abs() - steps * kUnitRoundoffFp32 * magnitude;
  EXPECT_LE(excess.max().item<double>(), 0.0) << what;
}

TEST(RowProduct, AgreesWithFloat64OnEveryTableForFp32AndBf16Weights) {
  TwoThreads threads;
  at::manual_seed(0);
  for (const ops::CpuKernels* table : ops::cpu_kernel_tables()) {
    ops::CpuKernelsOverride use(*table);
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      for (const std::int64_t K : {std::int64_t{5}, std::int64_t{64}, std::int64_t{577}}) {
        const auto w = at::randn({1000, K}).to(dtype);
        const auto x = at::randn({K});
        const auto bias = at::randn({1000});
        const std::string what = std::string(table->isa) + " " + c10::toString(dtype) + " K=" + std::to_string(K);
        ASSERT_TRUE(ops::row_product_applies(x, w, bias)) << what;
        expect_within_the_sum_bound(ops::row_product(x, w, at::Tensor()), w, x, what);
        // The bias is added once, in fp32, after the sum.
        EXPECT_TRUE(at::equal(ops::row_product(x, w, bias), ops::row_product(x, w, at::Tensor()) + bias)) << what;
      }
    }
  }
}

TEST(RowProduct, ChunksAStalledWorkerHoldsAreTakenBackWithTheSameBits) {
  at::manual_seed(1);
  // The SmolLM head's shape, a few hundred chunks: the worker takes some before it stalls.
  const auto w = at::randn({8192, 576});
  const auto wb = w.to(at::kBFloat16);
  const auto x = at::randn({576});
  at::Tensor alone, alone_bf16;
  {
    at::set_num_threads(1);  // the caller alone: no worker
    alone = ops::row_product(x, w, at::Tensor());
    alone_bf16 = ops::row_product(x, wb, at::Tensor());
  }
  TwoThreads threads;
  EXPECT_TRUE(at::equal(ops::row_product(x, w, at::Tensor()), alone));
  const auto before = ops::row_product_chunks_taken_back();
  {
    // Every chunk a worker takes stalls 20 ms half-way; products keep coming while the worker
    // still holds a chunk of an earlier one (its slot stays pinned, its tensors alive).
    // Until the caller has taken a chunk back (on a loaded machine the worker may not run during
    // the first products at all), at most 200 products.
    ops::RowProductStall stall(20000);
    for (int i = 0; i < 200 && (i < 20 || ops::row_product_chunks_taken_back() == before); ++i) {
      ASSERT_TRUE(at::equal(ops::row_product(x, w, at::Tensor()), alone)) << "product " << i;
      ASSERT_TRUE(at::equal(ops::row_product(x, wb, at::Tensor()), alone_bf16)) << "bf16 product " << i;
    }
  }
  EXPECT_GT(ops::row_product_chunks_taken_back(), before);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(at::equal(ops::row_product(x, w, at::Tensor()), alone));
}

TEST(RowProduct, OneRowThroughLinearInTakesItOnlyWhereAutogradNeedsNothing) {
  TwoThreads threads;
  at::manual_seed(2);
  const auto w = at::randn({300, 128});
  const auto b = at::randn({300});
  const auto x = at::randn({1, 1, 128});
  const auto y = ops::linear_in(x, w, b, at::kFloat);
  EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{1, 1, 300}));
  EXPECT_TRUE(at::equal(y.reshape({-1}), ops::row_product(x.reshape({-1}), w, b)));
  // An input that autograd tracks keeps ATen's differentiable product.
  const auto xg = x.clone().requires_grad_(true);
  const auto yg = ops::linear_in(xg, w, b, at::kFloat);
  ASSERT_TRUE(yg.requires_grad());
  yg.sum().backward();
  EXPECT_TRUE(at::allclose(xg.grad().reshape({-1}), w.sum(0), 1e-5, 1e-5));
}

}  // namespace
}  // namespace ctune
