// The fused CPU kernels (ops/cpu_kernels.h: attention softmax, gated activation, RMSNorm, RoPE,
// cross entropy) against ATen's composite operations in float64, run on every instruction-set
// table this CPU has (AVX-512, AVX2, baseline). In float64 the kernels do the same arithmetic
// as the composite graph in another order (~1e-15). In fp32 and bf16 the bound of each check is
// derived from the roundings the kernel performs (comments beside each; docs/performance.md
// "Kernels" lists them), against float64 evaluated on the same rounded inputs, so input
// rounding is not counted.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "margins.h"
#include "model/attention.h"
#include "ops/attention.h"
#include "ops/cpu_gemm.h"
#include "ops/cpu_kernels.h"
#include "ops/fused_cross_entropy.h"
#include "ops/fused_glu.h"
#include "ops/fused_norm.h"
#include "ops/fused_optimizer.h"
#include "ops/fused_rope.h"
#include "ops/tensor_pool.h"
#include "ops/vector_math.h"

namespace ctune {
namespace {

using test::kUnitRoundoffBf16;
using test::kUnitRoundoffFp32;
using test::within;

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }
double max_diff(const at::Tensor& a, const at::Tensor& b) { return max_abs(a.to(at::kDouble) - b.to(at::kDouble)); }

// Runs `body` once per kernel table this CPU supports, naming the table.
template <typename F>
void on_every_table(F body) {
  for (const ops::CpuKernels* table : ops::cpu_kernel_tables()) {
    ops::CpuKernelsOverride use(*table);
    body(std::string(table->isa));
  }
}

// ---- the scalar functions the kernels vectorize ---------------------------------------------

TEST(Kernels, ExpTanhSigmoidStayWithinTheirStatedErrors) {
  double exp_rel = 0, tanh_abs = 0, sigmoid_rel = 0;
  for (double x = -87.0; x <= 88.0; x += 1.0 / 1024) {
    const float f = static_cast<float>(x);
    exp_rel = std::max(exp_rel, std::abs(ops::vec::exp_f32(f) - std::exp(double(f))) / std::exp(double(f)));
  }
  for (double x = -20.0; x <= 20.0; x += 1.0 / 4096) {
    const float f = static_cast<float>(x);
    tanh_abs = std::max(tanh_abs, std::abs(ops::vec::tanh_f32(f) - std::tanh(double(f))));
    const double s = 1.0 / (1.0 + std::exp(-double(f)));
    sigmoid_rel = std::max(sigmoid_rel, std::abs(ops::vec::sigmoid_f32(f) - s) / s);
  }
  // vector_math.h: exp within 2 ulp relative (ulp of fp32 = 2 u), tanh within 2 ulp of 1
  // absolute, sigmoid within exp's error plus one add and one division (4 ulp).
  EXPECT_TRUE(within("exp_f32: max relative error over [-87, 88]", exp_rel, 4 * kUnitRoundoffFp32));
  EXPECT_TRUE(within("tanh_f32: max absolute error over [-20, 20]", tanh_abs, 4 * kUnitRoundoffFp32));
  EXPECT_TRUE(within("sigmoid_f32: max relative error over [-20, 20]", sigmoid_rel, 8 * kUnitRoundoffFp32));
  EXPECT_EQ(ops::vec::exp_f32(-100.0f), 0.0f);
  // bf16 stores round to nearest even, as c10::BFloat16 does.
  for (float v : {1.00390625f, 1.01171875f, -3.14159f, 65504.0f, 1e-30f}) {
    c10::BFloat16 ours;
    ops::vec::store(&ours, 0, v);
    EXPECT_EQ(ours.x, c10::BFloat16(v).x) << v;
  }
}

// ---- attention softmax ----------------------------------------------------------------------

struct AttentionCase {
  std::int64_t B, h, hkv, T, d;
  double scale, softcap;
};

// The fused blocked kernel in `dtype` against the float64 textbook graph on the same (rounded)
// q, k, v: output and the gradients of q, k and v under the same random output weights.
void check_attention(const AttentionCase& c, at::ScalarType dtype, const std::string& name, double out_tol_factor,
                     double grad_tol_factor) {
  at::manual_seed(11);
  auto seg = at::ones({c.B, c.T}, at::kLong);
  seg[0].narrow(0, c.T / 3, c.T - c.T / 3).fill_(2);  // two documents in row 0
  const auto mask = model::build_attention_mask(c.B, c.T, c.T, {}, seg, at::kCPU);
  auto q = at::randn({c.B, c.h, c.T, c.d}).to(dtype);
  auto k = at::randn({c.B, c.hkv, c.T, c.d}).to(dtype);
  auto v = at::randn({c.B, c.hkv, c.T, c.d}).to(dtype);
  auto w = at::randn({c.B, c.h, c.T, c.d}).to(dtype);  // the output's gradient, exact in every dtype
  std::vector<at::Tensor> ref;
  {
    auto q64 = q.to(at::kDouble).requires_grad_(true), k64 = k.to(at::kDouble).requires_grad_(true),
         v64 = v.to(at::kDouble).requires_grad_(true);
    auto out = ops::attention_core(q64, k64, v64, mask, c.scale, ops::AttentionKernel::materialized, c.softcap);
    auto g = torch::autograd::grad({(out * w.to(at::kDouble)).sum()}, {q64, k64, v64});
    ref = {out.detach(), g[0], g[1], g[2]};
  }
  on_every_table([&](const std::string& isa) {
    auto qi = q.clone().requires_grad_(true), ki = k.clone().requires_grad_(true), vi = v.clone().requires_grad_(true);
    auto out = ops::attention_core(qi, ki, vi, mask, c.scale, ops::AttentionKernel::blocked, c.softcap);
    auto g = torch::autograd::grad({(out * w).sum()}, {qi, ki, vi});
    const std::string what = name + " [" + isa + "]";
    EXPECT_TRUE(within(what + ": max |out - float64| / max |v|", max_diff(out, ref[0]) / max_abs(ref[0]), out_tol_factor));
    const char* names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) {
      const double rel = (g[i].to(at::kDouble) - ref[i + 1]).norm().item<double>() / ref[i + 1].norm().item<double>();
      EXPECT_TRUE(within(what + ": |" + names[i] + " - float64| / |" + names[i] + "|", rel, grad_tol_factor));
    }
  });
}

TEST(Kernels, FusedAttentionFp32AgreesWithFloat64) {
  // fp32: the scores' matmul errs by about d u |q||k| ~ sqrt(d) u (randn entries), the exp by
  // 2 ulp, the row sums by about sqrt(n) u; so probabilities err relatively by ~(scale sqrt(d)
  // + sqrt(n) + 4) u and the output (a convex combination, then a matmul of n terms) by about
  // twice that times max |v|. With d = 16, n <= 300: ~60 u; 256 u leaves room. Gradients pass
  // the same roundings about three times: 512 u relative in norm.
  check_attention({2, 4, 2, 300, 16, 0.25, 0.0}, at::kFloat, "fp32", 256 * kUnitRoundoffFp32, 512 * kUnitRoundoffFp32);
  check_attention({2, 4, 2, 300, 16, 0.25, 1.5}, at::kFloat, "fp32 soft-capped", 256 * kUnitRoundoffFp32, 512 * kUnitRoundoffFp32);
}

TEST(Kernels, FusedAttentionBf16AgreesWithFloat64) {
  // bf16: the scores are rounded (relative u_bf16, so a score s moves by |s| u ~ 3 u for the
  // largest |s| here), the probabilities are rounded (u) and the output matmul rounds its result
  // (u): about (3 + 2) u relative of max |v| for the output, 8 u allowed. The gradients go
  // through about 4 rounded matmuls and the rounded scores: relative error in norm about
  // u sqrt(3 * 4) (docs/testing.md, low precision) ~ 3.5 u; 8 u allowed.
  check_attention({2, 4, 2, 300, 16, 0.25, 0.0}, at::kBFloat16, "bf16", 8 * kUnitRoundoffBf16, 8 * kUnitRoundoffBf16);
  check_attention({2, 4, 2, 300, 16, 0.25, 1.5}, at::kBFloat16, "bf16 soft-capped", 8 * kUnitRoundoffBf16, 8 * kUnitRoundoffBf16);
}

TEST(Kernels, FusedAttentionFloat64IsTheTextbookGraphOnEveryTable) {
  // float64 runs the same kernels in double arithmetic: only the summation order differs.
  check_attention({2, 6, 3, 140, 8, 0.35, 2.0}, at::kDouble, "float64", 1e-12, 1e-12);
}

// ---- gated activation -----------------------------------------------------------------------

at::Tensor glu_reference(const at::Tensor& gate, const at::Tensor& up, ops::GluKind kind) {
  return (kind == ops::GluKind::silu ? at::silu(gate) : at::gelu(gate, "tanh")) * up;
}

TEST(Kernels, GatedActivationAgreesWithFloat64) {
  for (const auto kind : {ops::GluKind::silu, ops::GluKind::gelu_tanh}) {
    const std::string act = kind == ops::GluKind::silu ? "SwiGLU" : "GeGLU";
    for (const auto dtype : {at::kDouble, at::kFloat, at::kBFloat16}) {
      at::manual_seed(5);
      // A fused gate_up output [.., 2 I] (Phi-3) and the halves of it as separate tensors.
      auto both = (at::randn({3, 17, 2 * 40}) * 3).to(dtype);
      auto w = at::randn({3, 17, 40}).to(dtype);
      const auto I = 40;
      auto b64 = both.to(at::kDouble).requires_grad_(true);
      auto ref = glu_reference(b64.narrow(-1, 0, I), b64.narrow(-1, I, I), kind);
      auto ref_grad = torch::autograd::grad({(ref * w.to(at::kDouble)).sum()}, {b64})[0];
      // The kernel evaluates act(g) · u in fp32 with act within a few ulp (vector_math.h) and
      // rounds once to the dtype; backward likewise: 8 ulp of fp32, or one bf16 rounding plus
      // the fp32 work (2 u_bf16), relative to the largest value. float64: libm vs ATen, 1e-13.
      const double u = dtype == at::kDouble ? 1e-13 : dtype == at::kFloat ? 16 * kUnitRoundoffFp32 : 2 * kUnitRoundoffBf16;
      on_every_table([&](const std::string& isa) {
        const std::string what = act + " " + std::string(c10::toString(dtype)) + " [" + isa + "]";
        auto fused_in = both.clone().requires_grad_(true);
        auto out = ops::gated_activation_fused(fused_in, kind);
        auto grad = torch::autograd::grad({(out * w).sum()}, {fused_in})[0];
        EXPECT_TRUE(within(what + ", fused gate_up: max |out - float64| / max |out|", max_diff(out, ref) / max_abs(ref), u));
        EXPECT_TRUE(within(what + ", fused gate_up: max |d both - float64| / max", max_diff(grad, ref_grad) / max_abs(ref_grad), u));
        auto gate = both.narrow(-1, 0, I).contiguous().requires_grad_(true);
        auto up = both.narrow(-1, I, I).contiguous().requires_grad_(true);
        auto out2 = ops::gated_activation(gate, up, kind);
        auto g2 = torch::autograd::grad({(out2 * w).sum()}, {gate, up});
        EXPECT_TRUE(at::equal(out2, out)) << what << ": separate and fused inputs give the same output";
        EXPECT_TRUE(at::equal(at::cat({g2[0], g2[1]}, -1), grad)) << what << ": and the same gradients";
      });
    }
  }
}

// ---- RMSNorm --------------------------------------------------------------------------------

at::Tensor norm_reference(const at::Tensor& x, const at::Tensor& w, double eps, bool offset) {
  // Hugging Face's arithmetic, in float64.
  auto y = x * at::rsqrt(x.pow(2).mean(-1, true) + eps);
  return offset ? y * (1 + w) : w * y;
}

TEST(Kernels, RMSNormAgreesWithFloat64) {
  for (const bool offset : {false, true})
    for (const auto dtype : {at::kDouble, at::kFloat, at::kBFloat16}) {
      at::manual_seed(7);
      auto x = (at::randn({5, 9, 64}) * 2 + 0.5).to(dtype);
      auto w = (at::randn({64}) * 0.3 + 1).to(dtype);
      auto g = at::randn({5, 9, 64}).to(dtype);
      auto x64 = x.to(at::kDouble).requires_grad_(true), w64 = w.to(at::kDouble).requires_grad_(true);
      auto ref = norm_reference(x64, w64, 1e-6, offset);
      auto ref_grads = torch::autograd::grad({(ref * g.to(at::kDouble)).sum()}, {x64, w64});
      // fp32: the mean of 64 squares (~8 u), the rsqrt (2 u), two products (2 u): 16 u of the
      // largest value; the weight's gradient sums 45 rows (sqrt(45) u more). bf16: the output
      // and the input's gradient are rounded once (u_bf16) after fp32 work, and Hugging Face's
      // y.to(x.dtype) rounds y once more: 3 u_bf16; the weight gradient is a sum of 45 products
      // of rounded values, rounded once: 3 u_bf16 of its largest entry.
      const double tol = dtype == at::kDouble ? 1e-12 : dtype == at::kFloat ? 32 * kUnitRoundoffFp32 : 3 * kUnitRoundoffBf16;
      on_every_table([&](const std::string& isa) {
        const std::string what = std::string(offset ? "(1 + w) " : "") + "RMSNorm " + c10::toString(dtype) + " [" + isa + "]";
        auto xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
        auto out = ops::rms_norm(xi, wi, 1e-6, offset);
        EXPECT_EQ(out.scalar_type(), dtype);
        auto grads = torch::autograd::grad({(out * g).sum()}, {xi, wi});
        EXPECT_TRUE(within(what + ": max |out - float64| / max |out|", max_diff(out, ref) / max_abs(ref), tol));
        EXPECT_TRUE(within(what + ": max |dx - float64| / max |dx|", max_diff(grads[0], ref_grads[0]) / max_abs(ref_grads[0]), tol));
        EXPECT_TRUE(within(what + ": max |dw - float64| / max |dw|", max_diff(grads[1], ref_grads[1]) / max_abs(ref_grads[1]), tol));
      });
    }
}

TEST(Kernels, RMSNormOfBf16WithFp32WeightsIsFp32AsInHuggingFace) {
  // Full fine-tuning under bf16 autocast keeps fp32 master weights: weight * y.to(bf16) is fp32.
  at::manual_seed(8);
  auto x = at::randn({4, 32}).to(at::kBFloat16);
  auto w = at::randn({32});
  auto out = ops::rms_norm(x, w, 1e-5, false);
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  auto x32 = x.to(at::kFloat);
  auto expected = w * (x32 * at::rsqrt(x32.pow(2).mean(-1, true) + 1e-5)).to(at::kBFloat16);
  // The kernel's y may differ from ATen's by an ulp of fp32 before the bf16 rounding, which can
  // then land on the neighbouring bf16 value: one bf16 ulp (2 u_bf16) of |w y| at most.
  EXPECT_TRUE(within("bf16 x, fp32 w: max |out - ATen| / max |out|", max_diff(out, expected) / max_abs(expected), 2 * kUnitRoundoffBf16));
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST(Kernels, RopeAgreesWithTheRotateHalfFormula) {
  for (const std::int64_t rot : {16, 12})  // full, and partial rotary (Phi-3)
    for (const auto dtype : {at::kDouble, at::kFloat, at::kBFloat16}) {
      at::manual_seed(9);
      const std::int64_t B = 2, T = 7, heads = 3, d = 16;
      const auto acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
      auto angles = at::rand({B, T, rot / 2}, at::kDouble) * 6;
      auto cos = at::cat({angles.cos(), angles.cos()}, -1).to(acc), sin = at::cat({angles.sin(), angles.sin()}, -1).to(acc);
      // q as the slice of a fused qkv projection: rows strided wider than heads x d.
      auto wide = at::randn({B, T, heads * d + 8}).to(dtype);
      auto x = wide.narrow(-1, 0, heads * d).view({B, T, heads, d});
      auto g = at::randn({B, heads, T, d}).to(dtype);
      auto x64 = x.to(at::kDouble).requires_grad_(true);
      auto ref = ops::apply_rope(x64.transpose(1, 2), cos.to(at::kDouble), sin.to(at::kDouble));
      auto ref_grad = torch::autograd::grad({(ref * g.to(at::kDouble)).sum()}, {x64})[0];
      // Two products and a sum in fp32 (3 u of the largest term), rounded once to the dtype.
      const double tol = dtype == at::kDouble ? 1e-14 : dtype == at::kFloat ? 4 * kUnitRoundoffFp32 : 2 * kUnitRoundoffBf16;
      on_every_table([&](const std::string& isa) {
        const std::string what = "RoPE rot " + std::to_string(rot) + " " + c10::toString(dtype) + " [" + isa + "]";
        auto wi = wide.clone().requires_grad_(true);
        auto xi = wi.narrow(-1, 0, heads * d).view({B, T, heads, d});
        auto out = ops::rope_heads_first(xi, cos, sin, dtype);
        EXPECT_TRUE(out.is_contiguous());
        auto grad = torch::autograd::grad({(out * g).sum()}, {wi})[0];
        EXPECT_TRUE(within(what + ": max |out - float64| / max |x|", max_diff(out, ref) / max_abs(x64), tol));
        EXPECT_TRUE(within(what + ": max |dx - float64| / max |dx|", max_diff(grad.narrow(-1, 0, heads * d).view({B, T, heads, d}), ref_grad) /
                                                                         max_abs(ref_grad), tol));
        EXPECT_EQ(max_abs(grad.narrow(-1, heads * d, 8)), 0.0) << what << ": the columns past q get no gradient";
      });
    }
}

// ---- cross entropy --------------------------------------------------------------------------

TEST(Kernels, CrossEntropyRowsAgreeWithFloat64) {
  for (const double cap : {0.0, 3.0})
    for (const auto dtype : {at::kDouble, at::kFloat, at::kBFloat16}) {
      at::manual_seed(10);
      auto logits = (at::randn({6, 1000}) * 4).to(dtype);
      auto targets = at::randint(0, 1000, {6}, at::kLong);
      auto l64 = logits.to(at::kDouble).requires_grad_(true);
      auto z = cap > 0 ? at::tanh(l64 / cap) * cap : l64;
      auto ref_rows = at::logsumexp(z, 1) - z.gather(1, targets.unsqueeze(1)).squeeze(1);
      auto ref_grad = torch::autograd::grad({ref_rows.sum()}, {l64})[0];
      const auto zd = z.detach();
      const auto ref_entropy = at::logsumexp(zd, 1) - (at::softmax(zd, 1) * zd).sum(1);
      // fp32: a sum of 1000 exps (sqrt(1000) u typical, 1000 u at worst) and the log: the loss
      // (~|log-sum-exp| ~ 10) within 1000 u of it; the gradient's entries within 16 u of 1.
      // bf16 logits are exact inputs; the gradient is rounded once: 2 u_bf16 of its largest entry.
      const double loss_tol = dtype == at::kDouble ? 1e-12 : 1000 * kUnitRoundoffFp32 * 10;
      const double grad_tol = dtype == at::kDouble ? 1e-14 : dtype == at::kFloat ? 16 * kUnitRoundoffFp32 : 2 * kUnitRoundoffBf16;
      // The entropy, log-sum-exp - Σ p z: the log-sum-exp as the loss, and Σ e z / Σ e, two sums
      // of 1000 terms (1000 u each at worst) scaling a mean of z of at most max |z| ~ 20.
      const double entropy_tol = dtype == at::kDouble ? 1e-12 : loss_tol + 2 * 1000 * kUnitRoundoffFp32 * 20;
      on_every_table([&](const std::string& isa) {
        const std::string what = std::string(cap > 0 ? "capped " : "") + "cross entropy " + c10::toString(dtype) + " [" + isa + "]";
        at::Tensor rows, grad, entropy;
        ops::cross_entropy_rows(logits, targets, cap, &rows, &grad, &entropy);
        EXPECT_TRUE(within(what + ": max |loss - float64|", max_diff(rows, ref_rows), loss_tol));
        EXPECT_TRUE(within(what + ": max |entropy - float64|", max_diff(entropy, ref_entropy), entropy_tol));
        EXPECT_TRUE(within(what + ": max |grad - float64|", max_diff(grad, ref_grad), grad_tol));
      });
    }
}

TEST(Kernels, CrossEntropyRefusesATargetOutsideTheVocabulary) {
  at::Tensor rows;
  EXPECT_THROW(ops::cross_entropy_rows(at::zeros({2, 5}), at::tensor({1, 5}, at::kLong), 0, &rows, nullptr), c10::Error);
}

// ---- the head's weight gradient: bf16 operands, fp32 accumulator (ops/cpu_gemm.h) --------------

TEST(Kernels, Bf16WeightGradientAccumulatesInFp32) {
  if (!ops::cpu_gemm::bf16_available())
    GTEST_SKIP() << "no oneDNN bf16 GEMM in this build or on this CPU: the chunked loss keeps ATen's matmul";
  at::manual_seed(11);
  const std::int64_t rows = 300, out = 70, in = 50;
  const auto dy = at::randn({rows, out}).to(at::kBFloat16), x = at::randn({rows, in}).to(at::kBFloat16);
  const auto start = at::randn({out, in});
  const auto exact = dy.to(at::kDouble).t().mm(x.to(at::kDouble));  // on the rounded operands
  // A bf16 x bf16 product is exact in fp32 (8 + 8 significant bits), so the only rounding is the
  // fp32 sum of rows (+1 with the accumulator's own value) terms, in any order:
  // |error| <= gamma_n sum |terms| with gamma_n = n u / (1 - n u), u = 2^-24.
  const auto terms = dy.to(at::kDouble).abs().t().mm(x.to(at::kDouble).abs());
  const auto gamma = [](double n) { return n * kUnitRoundoffFp32 / (1 - n * kUnitRoundoffFp32); };

  auto dw = at::full({out, in}, std::numeric_limits<float>::quiet_NaN());  // overwritten, never read
  ASSERT_TRUE(ops::cpu_gemm::weight_grad_fp32(dw, dy, x, /*accumulate=*/false));
  EXPECT_TRUE(within("dyᵀ x: worst |error| / its bound", ((dw.to(at::kDouble) - exact).abs() / (gamma(rows) * terms + 1e-300)).max().item<double>(), 1.0));

  auto acc = start.clone();
  ASSERT_TRUE(ops::cpu_gemm::weight_grad_fp32(acc, dy, x, /*accumulate=*/true));
  const auto with_start = exact + start.to(at::kDouble);
  const auto bound = gamma(rows + 1) * (terms + start.to(at::kDouble).abs());
  EXPECT_TRUE(within("acc + dyᵀ x: worst |error| / its bound", ((acc.to(at::kDouble) - with_start).abs() / bound).max().item<double>(), 1.0));

  // Operands it does not serve are left to the caller, the accumulator untouched.
  auto kept = start.clone();
  EXPECT_FALSE(ops::cpu_gemm::weight_grad_fp32(kept, dy.to(at::kFloat), x.to(at::kFloat), true));
  EXPECT_FALSE(ops::cpu_gemm::weight_grad_fp32(kept, dy, x.narrow(1, 0, in - 1), true));
  EXPECT_TRUE(kept.equal(start));
}

// ---- optimizer step -------------------------------------------------------------------------

TEST(Kernels, AdamWStepIsTorchsUpdate) {
  // torch.optim.AdamW's single-tensor update, in ATen operations (as train/step/optimizer.cpp
  // runs it where the kernel does not apply), five steps with weight decay.
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    on_every_table([&](const std::string& isa) {
      at::manual_seed(12);
      auto p = at::randn({1000}, dtype), m = at::zeros_like(p), v = at::zeros_like(p);
      auto rp = p.clone(), rm = m.clone(), rv = v.clone();
      const double lr = 1e-2, wd = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8;
      for (std::int64_t step = 1; step <= 5; ++step) {
        auto g = at::randn({1000}, dtype);
        ASSERT_TRUE(ops::adamw_step(p, g, m, v, {lr, wd, b1, b2, eps, step}));
        rp.mul_(1.0 - lr * wd);
        rm.lerp_(g, 1.0 - b1);
        rv.mul_(b2).addcmul_(g, g, 1.0 - b2);
        const double bias1 = 1.0 - std::pow(b1, double(step)), bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(step)));
        rp.addcdiv_(rm, (rv.sqrt() / bias2_sqrt).add_(eps), -lr / bias1);
      }
      // The same operations in the same order; a fused multiply-add rounds once where ATen
      // rounds twice, so each step may leave p one rounding (u |p|) apart, and the moments too:
      // five steps, 16 u of the largest value. (u: unit roundoff of the dtype.)
      const double u = dtype == at::kDouble ? 1.1102230246251565e-16 : kUnitRoundoffFp32;
      const std::string what = std::string("AdamW ") + c10::toString(dtype) + " [" + isa + "]";
      EXPECT_TRUE(within(what + ": max |p - torch's update| / max |p| after 5 steps", max_diff(p, rp) / max_abs(rp), 16 * u));
      EXPECT_TRUE(within(what + ": max |v - torch's| / max v", max_diff(v, rv) / max_abs(rv), 16 * u));
      EXPECT_TRUE(within(what + ": max |m - torch's| / max |m|", max_diff(m, rm) / max_abs(rm), 16 * u));
    });
  }
}

TEST(Kernels, GradientUnscaleCheckAndNormAgreeWithFloat64) {
  on_every_table([&](const std::string& isa) {
    at::manual_seed(13);
    auto g = at::randn({70001}) * 100;
    const double ref = g.to(at::kDouble).pow(2).sum().item<double>();
    // Σ of 70001 float64 products of fp32 values: exact products, float64 sums, 1e-12 relative.
    EXPECT_TRUE(within("sum of squares vs float64 [" + isa + "]", std::abs(*ops::sum_of_squares(g) - ref) / ref, 1e-12));
    auto scaled = g.clone();
    EXPECT_TRUE(*ops::scale_and_check_finite(scaled, 1.0 / 1024, true));
    EXPECT_TRUE(at::equal(scaled, g * (1.0f / 1024))) << "unscaling multiplies as ATen's mul_";
    for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), std::nanf("")}) {
      auto h = g.clone();
      h[54321] = bad;
      EXPECT_FALSE(*ops::scale_and_check_finite(h, 1.0, false)) << bad << " [" << isa << "]";
      EXPECT_FALSE(std::isfinite(*ops::sum_of_squares(h))) << "a non-finite gradient makes the norm non-finite";
    }
  });
  auto half = at::zeros({4}, at::kHalf);
  EXPECT_FALSE(ops::sum_of_squares(half).has_value()) << "fp16: ATen's path";
}

}  // namespace
}  // namespace ctune

// The machine's rates are measured from the tensor pool (train/forecast/machine.cpp) before
// `train --fit` chooses its allocator: the scope must hand back the allocator it replaced, and
// a tensor made inside it must stay usable after it.
TEST(TensorPool, AScopeRestoresTheAllocatorItReplaced) {
  c10::Allocator* const before = c10::GetCPUAllocator();
  at::Tensor kept;
  {
    const ctune::ops::TensorPoolScope pool;
    EXPECT_NE(c10::GetCPUAllocator(), before);
    kept = at::ones({1 << 20});  // 4 MiB: pooled
  }
  EXPECT_EQ(c10::GetCPUAllocator(), before);
  EXPECT_EQ(kept.sum().item<double>(), static_cast<double>(1 << 20));
}
