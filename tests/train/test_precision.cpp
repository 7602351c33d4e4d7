// Mixed precision: the matmul helpers round where an fp16/bf16 GEMM would (and overflow as
// fp16 does); a model under bf16/fp16 compute keeps fp32 master weights and gradients and
// matches the fp32 model within the low precision's error (estimated from the unit roundoff and
// the number of roundings, margins.h and docs/testing.md); GradScaler's unscale, skip,
// back-off and growth follow torch.amp.GradScaler (docs/formats.md#loss-scaling). QLoRA-style bases:
// after model::quantize_base every projection weight lives only quantised (the dense tensor is
// empty), the adapters still train, and the loss stays close to the bf16 base's (int8 closer
// than nf4, as their error bounds say).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "model/config.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "ops/compute.h"
#include "peft/lora.h"
#include "train/step/grad_scaler.h"
#include "train/step/loss.h"
#include "margins.h"

namespace fs = std::filesystem;
using namespace ctune;
using ctune::test::beyond;
using ctune::test::within;

namespace {

const fs::path kModel = fs::path(CTUNE_TEST_DATA_DIR) / "train-reference" / "model";

train::TensorBatch batch() {
  at::manual_seed(5);
  train::TensorBatch b;
  b.input_ids = at::randint(0, 96, {2, 24}, at::kLong);
  b.labels = b.input_ids.clone();
  b.position_ids = at::arange(24).repeat({2, 1});
  b.target_tokens = 2 * 23;
  return b;
}

// The LoRA targets of run(): the number of wrapped projections per layer counts matmuls.
const std::vector<std::string> kLoraTargets = {"q_proj", "v_proj", "down_proj"};

struct Result {
  double loss = 0;
  std::vector<std::pair<std::string, at::Tensor>> grads;
  model::QuantizeSummary quantized;
};

// One forward/backward with the base stored in `storage` (or quantised) and matmuls in `compute`.
Result run(bool lora, at::ScalarType storage, at::ScalarType compute, std::optional<quant::QuantSpec::Kind> quant = {},
           const fs::path& model_dir = kModel) {
  auto lm = model::load_causal_lm(model_dir, storage);
  if (lora) {
    peft::LoraOptions o;
    o.rank = 4;
    o.targets = kLoraTargets;
    peft::apply_lora(lm, o);
    at::manual_seed(3);
    at::NoGradGuard no_grad;
    for (auto& item : lm->named_parameters(true))
      if (item.key().find(".lora_B.") != std::string::npos) item.value().normal_(0, 0.2);
  } else {
    peft::enable_full_finetune(lm);
  }
  Result r;
  if (quant) {
    quant::QuantSpec spec;
    spec.kind = *quant;
    r.quantized = model::quantize_base(lm, spec);
  }
  if (compute != at::kFloat) lm->set_compute_dtype(compute);
  lm->train();
  auto b = batch();
  auto loss = train::next_token_loss_sum(lm, b) / static_cast<double>(b.target_tokens);
  loss.backward();
  r.loss = loss.item<double>();
  for (const auto& item : lm->named_parameters(true)) {
    const bool projection = item.key().find("_proj.weight") != std::string::npos && item.key().find(".lora_") == std::string::npos;
    if (quant && projection) EXPECT_EQ(item.value().numel(), 0) << item.key() << " should be released";
    if (!item.value().requires_grad()) continue;
    EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key() << ": trainable weights are fp32 masters";
    EXPECT_EQ(item.value().grad().scalar_type(), at::kFloat) << item.key();
    r.grads.emplace_back(item.key(), item.value().grad().clone());
  }
  return r;
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / (b.to(at::kDouble).norm().item<double>() + 1e-30);
}

// The RMS of the fp32 model's logits about each row's mean on batch() (what an NLL is sensitive to).
double logit_spread(const fs::path& model_dir = kModel) {
  auto lm = model::load_causal_lm(model_dir, at::kFloat);
  at::NoGradGuard no_grad;
  auto logits = lm->forward(batch().input_ids).to(at::kDouble);
  return (logits - logits.mean(-1, /*keepdim=*/true)).pow(2).mean().sqrt().item<double>();
}

void expect_close_to_fp32(bool lora, at::ScalarType low, const fs::path& model_dir = kModel) {
  const auto reference = run(lora, at::kFloat, at::kFloat, {}, model_dir);
  const auto mixed = run(lora, lora ? low : at::kFloat, low, {}, model_dir);
  const std::string what = (model_dir == kModel ? std::string() : model_dir.parent_path().filename().string() + ": ") +
                           (lora ? "LoRA" : "full") + (low == at::kHalf ? " fp16" : " bf16");
  const double u = low == at::kHalf ? ctune::test::kUnitRoundoffFp16 : ctune::test::kUnitRoundoffBf16;
  const double matmuls = ctune::test::llama_matmuls(model::load_model_config(model_dir).num_hidden_layers,
                                                    lora ? static_cast<std::int64_t>(kLoraTargets.size()) : 0);
  // The loss is a mean of NLLs: its change is at most their mean |dNLL|, estimated as for a forward.
  EXPECT_TRUE(within(what + ": |loss - fp32 loss|", std::abs(mixed.loss - reference.loss),
                     3 * ctune::test::low_precision_nll_estimate(u, matmuls, logit_spread(model_dir))));
  ASSERT_EQ(mixed.grads.size(), reference.grads.size());
  double worst = 0;
  for (std::size_t i = 0; i < mixed.grads.size(); ++i)
    worst = std::max(worst, relative_error(mixed.grads[i].second, reference.grads[i].second));
  EXPECT_TRUE(within(what + ": worst gradient, relative error vs fp32", worst,
                     4 * ctune::test::low_precision_grad_estimate(u, matmuls)));
}

}  // namespace

TEST(Precision, MatmulsRoundLikeLowPrecisionGemms) {
  auto x = at::randn({5, 16}), w = at::randn({7, 16}), b = at::randn({7});
  auto bf = ops::linear_in(x, w, b, at::kBFloat16);
  EXPECT_EQ(bf.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(bf.to(at::kFloat), at::linear(x.to(at::kBFloat16), w.to(at::kBFloat16), b.to(at::kBFloat16)).to(at::kFloat)));
  auto h = ops::linear_in(x, w, b, at::kHalf);
  EXPECT_EQ(h.scalar_type(), at::kHalf);
  auto expected = at::linear(x.to(at::kHalf).to(at::kFloat), w.to(at::kHalf).to(at::kFloat), b.to(at::kHalf).to(at::kFloat));
  EXPECT_TRUE(at::equal(h, expected.to(at::kHalf)));
  // fp16's range ends at 65504: 300 * 300 overflows to inf, as an fp16 GEMM's output would.
  auto big = ops::linear_in(at::full({1, 1}, 300.0), at::full({1, 1}, 300.0), {}, at::kHalf);
  EXPECT_TRUE(std::isinf(big.item<float>()));
  EXPECT_EQ(ops::linear_in(x, w, b, at::ScalarType::Undefined).scalar_type(), at::kFloat);
}

namespace {

// |out - ref| / (r |ref| + (1 + r) K u32 Σ|a||b|) at its worst, ref = a · b in float64 on the
// 16-bit operands: the fp32 accumulation of a length-K dot product in any order (Higham's bound,
// K u32 over the sum of the absolute products), then the rounding to the 16-bit dtype, allowed
// r = 1.5 u16. One rounding to nearest errs by at most u16 |x|, and does so near the bottom of a
// binade, so over a few hundred outputs one lands within 1% of u16 on any CPU (0.994 of a
// u16 bound, on AVX2 and AVX-512 alike). What the check must tell apart is a rounding that is
// not to nearest (truncation, or a second rounding through a narrower type), whose errors reach
// 2 u16 and pass 1.5 u16 for about a quarter of the outputs: 1.5 u16 sits between the two, and
// a correct rounding keeps a margin of 2/3 (docs/testing.md). At most 1.
double worst_gemm_error(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double u16) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  const auto ref = at::matmul(a64, b64);
  const double K = static_cast<double>(a.size(-1));
  const double r = 1.5 * u16;
  const auto bound = r * ref.abs() + (1 + r) * K * ctune::test::kUnitRoundoffFp32 * at::matmul(a64.abs(), b64.abs()) + 1e-300;
  return ((out.to(at::kDouble) - ref).abs() / bound).max().item<double>();
}

}  // namespace

// Where the CPU has no 16-bit GEMM (fp16 everywhere in LibTorch 1.13, bf16 without AVX-512), the
// product runs in fp32 on the 16-bit operands and rounds once (ops/compute.h). Forced on for bf16
// here, so the route is checked on every CPU: outputs and every gradient (input, weight, bias)
// within one rounding plus fp32 accumulation of float64 on the same operands, in the 16-bit dtype;
// and operands past kGemmBlockElements, converted a block at a time along the output's columns
// or along the contraction, within the same bound.
TEST(Precision, GemmsWithoutA16BitKernelRunInFp32AndRoundOnce) {
  ops::Bf16GemmInFp32 route;
  ASSERT_TRUE(ops::gemm_in_fp32(at::kBFloat16, at::kCPU));
  ASSERT_TRUE(ops::gemm_in_fp32(at::kHalf, at::kCPU));
  at::manual_seed(11);
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    const std::string name = dtype == at::kHalf ? "fp16" : "bf16";
    const double u = dtype == at::kHalf ? ctune::test::kUnitRoundoffFp16 : ctune::test::kUnitRoundoffBf16;
    auto x = at::randn({2, 3, 40}).to(dtype).requires_grad_(), w = at::randn({24, 40}).to(dtype).requires_grad_();
    auto b = at::randn({24}).to(dtype).requires_grad_();
    auto y = ops::linear_in(x, w, b, dtype);
    ASSERT_EQ(y.scalar_type(), dtype);
    ASSERT_EQ(y.sizes(), at::IntArrayRef({2, 3, 24}));
    const auto x2 = x.detach().reshape({6, 40});
    // Exactly fp32's product rounded once.
    EXPECT_TRUE(at::equal(y.detach().reshape({6, 24}),
                          at::addmm(b.detach().to(at::kFloat), x2.to(at::kFloat), w.detach().to(at::kFloat).t()).to(dtype)));
    const auto g = at::randn({2, 3, 24}).to(dtype);
    y.backward(g);
    const auto g2 = g.reshape({6, 24});
    ASSERT_EQ(x.grad().scalar_type(), dtype);
    ASSERT_EQ(w.grad().scalar_type(), dtype);
    ASSERT_EQ(b.grad().scalar_type(), dtype);
    // The bias as one more term of each dot product: [x, 1] · [wᵀ; b].
    const auto x1 = at::cat({x2, at::ones({6, 1}, x2.options())}, 1), wb = at::cat({w.detach().t(), b.detach().unsqueeze(0)}, 0);
    EXPECT_TRUE(within(name + " forward", worst_gemm_error(y.detach().reshape({6, 24}), x1, wb, u), 1.0));
    if (dtype == at::kBFloat16) {
      // Negative control: the same fp32 products truncated to bf16 (the low 16 bits dropped).
      const auto f32 = at::addmm(b.detach().to(at::kFloat), x2.to(at::kFloat), w.detach().to(at::kFloat).t()).contiguous();
      const auto truncated = at::bitwise_and(f32.view(at::kInt), static_cast<int64_t>(0xFFFF0000u) - (int64_t{1} << 32)).view(at::kFloat).to(dtype);
      EXPECT_TRUE(beyond("bf16 forward truncated", worst_gemm_error(truncated, x1, wb, u), 1.0));
    }
    EXPECT_TRUE(within(name + " input gradient", worst_gemm_error(x.grad().reshape({6, 40}), g2, w.detach(), u), 1.0));
    EXPECT_TRUE(within(name + " weight gradient", worst_gemm_error(w.grad(), g2.t(), x2, u), 1.0));
    EXPECT_TRUE(within(name + " bias gradient", worst_gemm_error(b.grad().unsqueeze(0), at::ones({1, 6}), g2, u), 1.0));
    // Attention's batched products, with a transposed operand.
    auto q = at::randn({2, 3, 5, 16}).to(dtype), k = at::randn({2, 3, 7, 16}).to(dtype);
    const auto scores = ops::matmul_in(q, k.transpose(2, 3), dtype);
    EXPECT_TRUE(within(name + " batched", worst_gemm_error(scores, q, k.transpose(2, 3), u), 1.0));
  }
  // One row (decoding): bf16 dot products read straight from the weight's rows, with and
  // without a bias, on a projection and on a head past the block size; the gradient too.
  for (const std::int64_t out : {24, 6600}) {
    auto x = at::randn({1, 1, 640}).to(at::kBFloat16).requires_grad_(), w = at::randn({out, 640}).to(at::kBFloat16);
    const auto b = at::randn({out}).to(at::kBFloat16);
    const auto name = "bf16 one row x " + std::to_string(out);
    const auto plain = ops::linear_in(x, w, {}, at::kBFloat16), biased = ops::linear_in(x, w, b, at::kBFloat16);
    ASSERT_EQ(plain.sizes(), at::IntArrayRef({1, 1, out}));
    const auto x2 = x.detach().reshape({1, 640});
    EXPECT_TRUE(within(name, worst_gemm_error(plain.detach().reshape({1, out}), x2, w.t(), ctune::test::kUnitRoundoffBf16), 1.0));
    const auto x1 = at::cat({x2, at::ones({1, 1}, x2.options())}, 1), wb = at::cat({w.t(), b.unsqueeze(0)}, 0);
    EXPECT_TRUE(within(name + " + bias", worst_gemm_error(biased.detach().reshape({1, out}), x1, wb, ctune::test::kUnitRoundoffBf16), 1.0));
    const auto g = at::randn({1, 1, out}).to(at::kBFloat16);
    plain.backward(g);
    EXPECT_TRUE(within(name + " input gradient", worst_gemm_error(x.grad().reshape({1, 640}), g.reshape({1, out}), w, ctune::test::kUnitRoundoffBf16), 1.0));
  }
  // Past the block size: a head-like product (columns blocked) and a long contraction (blocked,
  // summed in fp32).
  const auto h = at::randn({3, 640}).to(at::kBFloat16), head = at::randn({640, 6600}).to(at::kBFloat16);
  ASSERT_GT(head.numel(), ops::kGemmBlockElements);
  EXPECT_TRUE(within("bf16 columns in blocks", worst_gemm_error(ops::matmul_nn(h, head), h, head, ctune::test::kUnitRoundoffBf16), 1.0));
  const auto a = at::randn({3, 8400}).to(at::kBFloat16), tall = at::randn({8400, 500}).to(at::kBFloat16);
  ASSERT_GT(tall.numel(), ops::kGemmBlockElements);
  EXPECT_TRUE(within("bf16 contraction in blocks", worst_gemm_error(ops::matmul_nn(a, tall), a, tall, ctune::test::kUnitRoundoffBf16), 1.0));
  // The head's weight-gradient shape: a long transposed left operand, its rows in tiles.
  const auto g = at::randn({1100, 4000}).to(at::kBFloat16), x = at::randn({1100, 30}).to(at::kBFloat16);
  ASSERT_GT(g.numel(), ops::kGemmBlockElements);
  EXPECT_TRUE(within("bf16 rows in blocks", worst_gemm_error(ops::matmul_in(g.t(), x, at::kBFloat16), g.t(), x, ctune::test::kUnitRoundoffBf16), 1.0));
  // Attention's scores past the block: batch entries a few at a time.
  const auto q = at::randn({2, 3, 700, 64}).to(at::kBFloat16), k = at::randn({2, 3, 2100, 64}).to(at::kBFloat16);
  ASSERT_GT(6 * 700 * 2100, ops::kGemmBlockElements);
  EXPECT_TRUE(within("bf16 batches in chunks",
                     worst_gemm_error(ops::matmul_in(q, k.transpose(2, 3), at::kBFloat16), q, k.transpose(2, 3), ctune::test::kUnitRoundoffBf16),
                     1.0));
}

TEST(Precision, LoraOverBf16BaseMatchesFp32) { expect_close_to_fp32(true, at::kBFloat16); }
TEST(Precision, LoraOverFp16BaseMatchesFp32) { expect_close_to_fp32(true, at::kHalf); }
TEST(Precision, FullFineTuneInBf16KeepsFp32Masters) { expect_close_to_fp32(false, at::kBFloat16); }
// Gemma's GeGLU and soft-caps under fp16 compute on a CPU, where LibTorch has no Half kernels
// for tanh or GELU (ops::tanh_any, gelu_tanh_any compute them in fp32): the Gemma 2 model with
// caps 2 and 3 (most scores and logits bent), and Gemma 3's.
TEST(Precision, GemmaLoraOverFp16BaseMatchesFp32) {
  for (const char* family : {"train-reference-gemma2", "train-reference-gemma3"})
    expect_close_to_fp32(true, at::kHalf, fs::path(CTUNE_TEST_DATA_DIR) / family / "model");
}

TEST(QLora, QuantisedBasesTrainAdaptersAndStayCloseToBf16) {
  const auto bf16 = run(true, at::kBFloat16, at::kBFloat16);
  const auto int8 = run(true, at::kBFloat16, at::kBFloat16, quant::QuantSpec::Int8);
  const auto nf4 = run(true, at::kBFloat16, at::kBFloat16, quant::QuantSpec::Nf4);
  const auto layers = 7 * model::load_model_config(kModel).num_hidden_layers;
  EXPECT_EQ(int8.quantized.layers, layers);
  EXPECT_EQ(nf4.quantized.layers, layers);
  EXPECT_EQ(int8.grads.size(), bf16.grads.size());
  // int8: 1 byte per weight + 4 bytes of row scale; nf4: half a byte + double-quantised scales.
  const double int8_ratio = static_cast<double>(int8.quantized.bytes_after) / static_cast<double>(int8.quantized.bytes_before);
  const double nf4_ratio = static_cast<double>(nf4.quantized.bytes_after) / static_cast<double>(nf4.quantized.bytes_before);
  // Integer arithmetic, the same on every machine (exact formulas: QuantBounds.BytesMatchFormulas):
  // int8 is 0.5 + 2 / in_features of bf16 (<= 0.5625 here), nf4 with double quantisation ~0.26.
  EXPECT_LT(int8_ratio, 0.6);
  EXPECT_LT(nf4_ratio, 0.32);
  // The quantisation error bounds: int8 moves a weight by at most 1/254 of its row's absmax
  // (~0.4%, about 1% of a typical weight), NF4 by up to 15% of its block's absmax (~5% of a
  // typical weight). The loss moves by about that relative amount or less.
  EXPECT_TRUE(within("int8 base: |loss - bf16 loss| / bf16 loss", std::abs(int8.loss - bf16.loss) / bf16.loss, 0.01));
  EXPECT_TRUE(within("nf4 base: |loss - bf16 loss| / bf16 loss", std::abs(nf4.loss - bf16.loss) / bf16.loss, 0.05));
  std::printf("[qlora] loss bf16 %.5f int8 %.5f nf4 %.5f; bytes vs bf16: int8 %.3f nf4 %.3f\n", bf16.loss, int8.loss, nf4.loss,
              int8_ratio, nf4_ratio);
}

TEST(GradScaler, FollowsTorchAmpSemantics) {
  train::GradScalerOptions o;
  o.enabled = true;
  o.growth_interval = 2;
  train::GradScaler scaler(o);
  EXPECT_EQ(scaler.scale(), 65536.0);
  auto p = at::zeros({3}).requires_grad_(true);
  std::vector<train::ParamGroup> groups{{{p}, 0.0}};
  EXPECT_EQ(scaler.scale_loss(at::tensor(2.0)).item<double>(), 131072.0);

  // Unscale multiplies by 1/scale; finite gradients: no skip, growth after two clean steps.
  p.mutable_grad() = at::full({3}, 65536.0);
  EXPECT_FALSE(scaler.unscale_and_check(groups));
  EXPECT_TRUE(at::equal(p.grad(), at::ones({3})));
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 65536.0);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 131072.0);
  EXPECT_EQ(scaler.state().growth_tracker, 0);

  // An inf or NaN anywhere: found, back off x0.5, tracker reset.
  scaler.update(false);
  EXPECT_EQ(scaler.state().growth_tracker, 1);
  p.mutable_grad() = at::tensor({1.0f, std::numeric_limits<float>::infinity(), 0.0f});
  EXPECT_TRUE(scaler.unscale_and_check(groups));
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  p.mutable_grad() = at::tensor({std::nanf(""), 0.0f, 0.0f});
  EXPECT_TRUE(scaler.unscale_and_check(groups));

  // Disabled (bf16/fp32): identity, but non-finite gradients are still reported.
  train::GradScaler off(train::GradScalerOptions{});
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_TRUE(off.unscale_and_check(groups));
  p.mutable_grad() = at::full({3}, 4.0);
  EXPECT_FALSE(off.unscale_and_check(groups));
  EXPECT_TRUE(at::equal(p.grad(), at::full({3}, 4.0)));
}
