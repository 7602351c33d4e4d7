// Training against an independent PyTorch reference (make_train_reference.py, float64): every
// full fine-tuning and LoRA/rsLoRA gradient, the loss, and a 10-step AdamW + cosine + clipping +
// accumulation trajectory, each within kNoiseFactor times the float32 noise of that very value
// (noise.json, measured by the reference script: docs/testing.md). Also: masked positions carry
// exactly zero gradient, packed rows equal unpacked ones, and accumulation is exact (8x1 == 2x4)
// up to float32 rounding.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <fstream>
#include <filesystem>

#include "core/json.h"
#include "io/safetensors.h"
#include "io/tensor_io.h"
#include "model/weights.h"
#include "peft/lora.h"
#include "train/step/loss.h"
#include "train/step/optimizer.h"
#include "train/step/trainer.h"
#include "margins.h"
#include "reference_io.h"

namespace fs = std::filesystem;
using namespace ctune;
using ctune::test::noise_tolerance;
using ctune::test::within;
using ctune::test::read_tensors;
using ctune::test::relative_error;

namespace {

const fs::path kRef = fs::path(CTUNE_TEST_DATA_DIR) / "train-reference";
// The same step on Qwen3's block (per-head q/k norms, head_dim != hidden / heads).
const fs::path kQwen3Ref = fs::path(CTUNE_TEST_DATA_DIR) / "train-reference-qwen3";
// Gemma 2 (soft-caps in the attention core and the chunked loss, sandwich and (1 + w) norms,
// GeGLU, scaled embeddings, a window) and Gemma 3 (q/k norms, local and global RoPE).
const fs::path kGemma2Ref = fs::path(CTUNE_TEST_DATA_DIR) / "train-reference-gemma2";
const fs::path kGemma3Ref = fs::path(CTUNE_TEST_DATA_DIR) / "train-reference-gemma3";
// Phi-3: fused qkv_proj / gate_up_proj (LoRA on the fused layers), partial rotary, longrope.
const fs::path kPhi3Ref = fs::path(CTUNE_TEST_DATA_DIR) / "train-reference-phi3";
const fs::path kQwen3MoeRef = fs::path(CTUNE_TEST_DATA_DIR) / "train-reference-qwen3_moe";
const fs::path kMixtralRef = fs::path(CTUNE_TEST_DATA_DIR) / "train-reference-mixtral";

// How far float32 rounding alone moves each reference value (relative; see make_train_reference.py).
const Json& noise(const fs::path& ref = kRef) {
  static std::map<std::string, Json> cache;
  auto it = cache.find(ref.string());
  if (it == cache.end()) it = cache.emplace(ref.string(), read_json_file(ref / "noise.json")).first;
  return it->second;
}

std::vector<train::TensorBatch> read_batches(const fs::path& ref = kRef) {
  std::vector<train::TensorBatch> out;
  for (const auto& b : read_json_file(ref / "batches.json")) out.push_back(test::batch_from_json(b));
  return out;
}

// One accumulated step over `micro`: sum of token losses / total targets, backward; with
// experts plus the config's router_aux_loss_coef times each micro-batch's load-balancing loss and
// `z_coef` times its router z-loss, weighted by its share of the targets (as the trainer adds
// moe.aux_loss_coef's and moe.router_z_loss_coef's).
double accumulate(model::CausalLM& lm, const std::vector<train::TensorBatch>& micro, double z_coef = 0) {
  std::int64_t targets = 0;
  for (const auto& b : micro) targets += b.target_tokens;
  const double coef = lm->config().arch.moe.router_aux_loss_coef;
  if (coef > 0) lm->train();  // the routers record their statistics in training mode only
  if (lm->model->router_record) lm->model->router_record->z_loss_trains = z_coef > 0;
  double total = 0;
  for (const auto& b : micro) {
    auto loss = train::next_token_loss_sum(lm, b);
    const double share = static_cast<double>(b.target_tokens) / static_cast<double>(targets);
    const auto router = train::router_losses(lm, coef * share, z_coef * share);
    total += loss.item<double>() / static_cast<double>(targets) + share * (coef * router.aux + z_coef * router.z);
    (loss / static_cast<double>(targets)).backward();
  }
  return total;
}

// The MoE references' router z-loss weight (0 for the dense ones).
double z_coef_of(const fs::path& ref) {
  return read_json_file(ref / "trajectory.json").value("router_z_loss_coef", 0.0);
}

// Every trainable gradient against the reference, relative to the reference tensor's norm,
// within kNoiseFactor times that tensor's own float32 noise. (A flat 1e-5 failed on AMD: the
// rsLoRA k_proj gradient of layer 1 has a float32 noise of 1.1e-5 by itself, its softmax
// being sharper under rsLoRA's larger scale.)
void expect_grads_match(model::CausalLM& lm, const std::map<std::string, at::Tensor>& ref, const Json& noise) {
  std::size_t checked = 0;
  for (const auto& item : lm->named_parameters(true)) {
    if (!item.value().requires_grad()) continue;
    auto it = ref.find(item.key());
    ASSERT_NE(it, ref.end()) << "no reference gradient for " << item.key();
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(within(item.key() + " gradient: relative error", relative_error(item.value().grad(), it->second),
                       noise_tolerance(noise.at(item.key()).get<double>())));
    ++checked;
  }
  EXPECT_EQ(checked, ref.size());
}

// |ours - reference| / |reference| of a loss, within kNoiseFactor times its float32 noise.
void expect_loss_matches(double ours, const char* ref_key, const Json& noise, const fs::path& dir = kRef) {
  const double ref = read_json_file(dir / "trajectory.json")[ref_key].get<double>();
  EXPECT_TRUE(within(std::string(ref_key) + ": relative error", std::abs(ours - ref) / std::abs(ref),
                     noise_tolerance(noise.at("loss").get<double>())));
}

void full_case(const fs::path& ref) {
  auto lm = model::load_causal_lm(ref / "model", at::kFloat);
  peft::enable_full_finetune(lm);
  auto batches = read_batches(ref);
  const double loss = accumulate(lm, {batches[0], batches[1]}, z_coef_of(ref));
  expect_loss_matches(loss, "full_loss", noise(ref)["full"], ref);
  expect_grads_match(lm, read_tensors(ref / "grads_full.safetensors"), noise(ref)["full"]);
}

TEST(TrainReference, FullFineTuneGradients) { full_case(kRef); }
TEST(TrainReference, Qwen3FullFineTuneGradients) { full_case(kQwen3Ref); }
TEST(TrainReference, Gemma2FullFineTuneGradients) { full_case(kGemma2Ref); }
TEST(TrainReference, Gemma3FullFineTuneGradients) { full_case(kGemma3Ref); }
TEST(TrainReference, Phi3FullFineTuneGradients) { full_case(kPhi3Ref); }
// Experts and routers, the routers' gradient including the load-balancing loss's.
TEST(TrainReference, Qwen3MoeFullFineTuneGradients) { full_case(kQwen3MoeRef); }
TEST(TrainReference, MixtralFullFineTuneGradients) { full_case(kMixtralRef); }

void lora_case(bool rslora, const char* variant, const fs::path& ref = kRef) {
  auto lm = model::load_causal_lm(ref / "model", at::kFloat);
  peft::LoraOptions o;
  o.rank = 4;
  o.alpha = 8.0;
  o.rslora = rslora;
  o.targets = {"all-linear", "lm_head"};  // the reference's eight targets
  auto summary = peft::apply_lora(lm, o);
  // The reference's A and B (B non-zero, so both get gradients): one pair per Linear of the
  // blocks (7 a layer; Phi-3's fused 4) and lm_head.
  auto weights = read_tensors(ref / "lora.safetensors");
  EXPECT_EQ(summary.wrapped.size(), weights.size() / 2);
  const auto& moe = lm->config().arch.moe;  // attention's four and every expert's three
  EXPECT_EQ(summary.wrapped.size(), moe.experts > 0             ? 2u * (4 + 3 * static_cast<std::size_t>(moe.experts)) + 1
                                    : lm->config().arch.fused_qkv ? 2u * 4 + 1
                                                                  : 2u * 7 + 1);
  ASSERT_EQ(test::copy_into(lm, weights), weights.size());
  auto batches = read_batches(ref);
  const double loss = accumulate(lm, {batches[0], batches[1]}, z_coef_of(ref));
  expect_loss_matches(loss, (std::string(variant) + "_loss").c_str(), noise(ref)[variant], ref);
  expect_grads_match(lm, read_tensors(ref / ("grads_" + std::string(variant) + ".safetensors")), noise(ref)[variant]);
  // The base stays frozen.
  for (const auto& item : lm->named_parameters(true)) {
    if (item.key().find(".lora_") == std::string::npos) EXPECT_FALSE(item.value().grad().defined()) << item.key();
  }
}

TEST(TrainReference, LoraGradients) { lora_case(false, "lora"); }
TEST(TrainReference, RsLoraGradients) { lora_case(true, "rslora"); }
TEST(TrainReference, Qwen3LoraGradients) { lora_case(false, "lora", kQwen3Ref); }
TEST(TrainReference, Gemma2LoraGradients) { lora_case(false, "lora", kGemma2Ref); }
TEST(TrainReference, Gemma3LoraGradients) { lora_case(false, "lora", kGemma3Ref); }
TEST(TrainReference, Phi3LoraGradients) { lora_case(false, "lora", kPhi3Ref); }
// LoRA on every expert (PEFT's names: gate/up/down_proj, Mixtral's w1/w3/w2), routers frozen;
// the aux loss's gradient reaches the adapters through the routers' inputs.
TEST(TrainReference, Qwen3MoeLoraGradients) { lora_case(false, "lora", kQwen3MoeRef); }
TEST(TrainReference, MixtralLoraGradients) { lora_case(false, "lora", kMixtralRef); }

class CyclingSource : public train::BatchSource {
 public:
  explicit CyclingSource(std::vector<train::TensorBatch> b) : batches_(std::move(b)) {}
  train::TensorBatch next() override { return batches_[i_++ % batches_.size()]; }

 private:
  std::vector<train::TensorBatch> batches_;
  std::size_t i_ = 0;
};

TEST(TrainReference, TenStepAdamWTrajectory) {
  auto lm = model::load_causal_lm(kRef / "model", at::kFloat);
  peft::enable_full_finetune(lm);
  train::OptimizerOptions oo;
  oo.weight_decay = 0.1;
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& item : lm->named_parameters(true)) trainable.emplace_back(item.key(), item.value());
  auto optimizer = train::make_optimizer(train::make_param_groups(trainable, oo), oo);
  train::TrainerOptions to;
  to.max_steps = 10;
  to.grad_accum = 2;
  to.clip_grad_norm = 1.0;
  to.schedule = {"cosine", 1e-2, 2, 10, 0.0};
  CyclingSource source(read_batches());
  const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / "train-trajectory";
  fs::remove_all(out);
  fs::create_directories(out);
  {
    train::MetricsLog metrics(out);
    train::Trainer trainer(lm, *optimizer, source, {}, to, &metrics);
    trainer.run();
  }
  Json ref = read_json_file(kRef / "trajectory.json");
  std::ifstream in(out / "metrics.jsonl");
  std::string line;
  std::size_t step = 0;
  double loss_err = 0, norm_err = 0, lr_err = 0;  // worst errors over the steps
  auto relative = [](double a, double b) { return std::abs(a - b) / std::abs(b); };
  while (std::getline(in, line)) {
    Json m = Json::parse(line);
    ASSERT_LT(step, 10u);
    loss_err = std::max(loss_err, relative(m["loss"].get<double>(), ref["trajectory"][step].get<double>()));
    norm_err = std::max(norm_err, relative(m["grad_norm"].get<double>(), ref["grad_norms"][step].get<double>()));
    lr_err = std::max(lr_err, std::abs(m["lr"].get<double>() - ref["lrs"][step].get<double>()));
    ++step;
  }
  EXPECT_EQ(step, 10u);
  // The trajectory's noise is that of the whole 10-step float32 run (AdamW amplifies it).
  EXPECT_TRUE(within("loss, worst step: relative error", loss_err, noise_tolerance(noise()["trajectory"].get<double>())));
  EXPECT_TRUE(within("grad_norm, worst step: relative error", norm_err,
                     noise_tolerance(noise()["grad_norms"].get<double>())));
  // The schedule is one closed form evaluated in double on both sides: a few ulp apart (lr is at
  // most 1e-2, so ~1e-18), where any wrong term moves it by more than 1e-6.
  EXPECT_TRUE(within("lr, worst step: |difference|", lr_err, 1e-12));
}

TEST(TrainReference, SgdMomentumTrajectory) {
  auto lm = model::load_causal_lm(kRef / "model", at::kFloat);
  peft::enable_full_finetune(lm);
  train::OptimizerOptions oo;
  oo.name = "sgd";
  oo.weight_decay = 0.01;
  oo.momentum = 0.9;
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& item : lm->named_parameters(true)) trainable.emplace_back(item.key(), item.value());
  auto optimizer = train::make_optimizer(train::make_param_groups(trainable, oo), oo);
  train::TrainerOptions to;
  to.max_steps = 6;
  to.grad_accum = 1;
  to.clip_grad_norm = 0;
  to.schedule = {"constant", 0.05, 1, 6, 0.0};
  CyclingSource source(read_batches());
  const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / "train-sgd";
  fs::remove_all(out);
  fs::create_directories(out);
  {
    train::MetricsLog metrics(out);
    train::Trainer(lm, *optimizer, source, {}, to, &metrics).run();
  }
  Json ref = read_json_file(kRef / "trajectory.json");
  std::ifstream in(out / "metrics.jsonl");
  std::size_t step = 0;
  double worst = 0;
  for (std::string line; std::getline(in, line); ++step) {
    const double ours = Json::parse(line)["loss"].get<double>(), theirs = ref["sgd_trajectory"][step].get<double>();
    worst = std::max(worst, std::abs(ours - theirs) / std::abs(theirs));
  }
  EXPECT_EQ(step, 6u);
  EXPECT_TRUE(within("loss, worst step: relative error", worst, noise_tolerance(noise()["sgd_trajectory"].get<double>())));
}

TEST(TrainSchedule, MatchesTransformersSchedules) {
  Json ref = read_json_file(kRef / "trajectory.json");
  // Closed forms evaluated in double on both sides: a few ulp apart (factors are at most 1), where
  // a wrong term moves a factor by more than 1e-3.
  for (const std::string name : {"linear", "constant", "cosine"}) {
    train::ScheduleOptions o{name, 1.0, 3, 12, 0.0};
    double worst = 0;
    for (int s = 0; s < 14; ++s) worst = std::max(worst, std::abs(train::learning_rate(o, s) - ref[name + "_factors"][s].get<double>()));
    EXPECT_TRUE(within(name + " factors, worst step: |difference|", worst, 1e-12));
  }
  // min_lr_ratio lifts the floor of the decay: lr = peak * (m + (1 - m) * factor).
  train::ScheduleOptions floor{"cosine", 2.0, 0, 10, 0.1};
  EXPECT_NEAR(train::learning_rate(floor, 10), 0.2, 1e-12);
  EXPECT_NEAR(train::learning_rate(floor, 0), 2.0, 1e-12);
}

// The selected-positions loss equals the masked full-logits loss, and the gradient reaching
// a masked position's logits is exactly zero.
TEST(TrainLoss, MaskedPositionsGetExactlyZeroGradient) {
  auto lm = model::load_causal_lm(kRef / "model", at::kFloat);
  auto batch = read_batches()[0];
  const double ours = train::next_token_loss_sum(lm, batch).item<double>();
  model::ForwardInputs in;
  in.input_ids = batch.input_ids;
  in.position_ids = batch.position_ids;
  in.segment_ids = batch.segment_ids;
  auto logits = lm->logits(in).detach().requires_grad_(true);  // [B, T, V]
  const auto T = logits.size(1);
  auto targets = batch.labels.narrow(1, 1, T - 1);
  auto mask = targets != data::kIgnoreIndex;
  auto safe = targets.masked_fill(mask.logical_not(), 0);
  auto per_token = at::nll_loss(at::log_softmax(logits.narrow(1, 0, T - 1).reshape({-1, logits.size(2)}), -1),
                                safe.reshape(-1), {}, at::Reduction::None);
  auto full = (per_token * mask.reshape(-1).to(at::kFloat)).sum();
  full.backward();
  // Two float32 evaluations of one loss sum (~40 tokens, ~200): each within the loss's float32
  // noise, so their difference within twice that.
  EXPECT_TRUE(within("summed loss vs full-logits loss: relative difference", std::abs(full.item<double>() - ours) / ours,
                     2 * noise_tolerance(noise()["full"]["loss"].get<double>())));
  auto g = logits.grad().narrow(1, 0, T - 1);
  auto masked_rows = g.index({mask.logical_not()});
  ASSERT_GT(masked_rows.size(0), 0);
  EXPECT_EQ(masked_rows.abs().max().item<float>(), 0.0f);
  EXPECT_GT(g.index({mask}).abs().max().item<float>(), 0.0f);
}

// Two documents packed into one row (segments, restarted positions) give the same loss and
// gradients as the two documents in separate padded rows.
TEST(TrainLoss, PackedEqualsUnpacked) {
  auto ids_a = at::randint(0, 96, {9}, at::kLong), ids_b = at::randint(0, 96, {13}, at::kLong);
  auto labels = [](const at::Tensor& ids) {
    auto l = ids.clone();
    l[0] = data::kIgnoreIndex;
    return l;
  };
  train::TensorBatch packed;
  packed.input_ids = at::cat({ids_a, ids_b}).unsqueeze(0);
  packed.labels = at::cat({labels(ids_a), labels(ids_b)}).unsqueeze(0);
  packed.position_ids = at::cat({at::arange(9), at::arange(13)}).unsqueeze(0);
  packed.segment_ids = at::cat({at::ones({9}, at::kInt), at::full({13}, 2, at::kInt)}).unsqueeze(0);
  train::TensorBatch split;
  split.input_ids = at::zeros({2, 13}, at::kLong);
  split.labels = at::full({2, 13}, data::kIgnoreIndex, at::kLong);
  split.segment_ids = at::zeros({2, 13}, at::kInt);
  split.position_ids = at::arange(13).repeat({2, 1});
  split.input_ids[0].narrow(0, 0, 9).copy_(ids_a);
  split.labels[0].narrow(0, 0, 9).copy_(labels(ids_a));
  split.segment_ids[0].narrow(0, 0, 9).fill_(1);
  split.input_ids[1].copy_(ids_b);
  split.labels[1].copy_(labels(ids_b));
  split.segment_ids[1].fill_(1);

  auto run = [&](const train::TensorBatch& b) {
    auto lm = model::load_causal_lm(kRef / "model", at::kFloat);
    peft::enable_full_finetune(lm);
    auto loss = train::next_token_loss_sum(lm, b);
    loss.backward();
    std::vector<at::Tensor> grads;
    for (const auto& p : lm->parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(loss.item<double>(), grads);
  };
  auto [loss_packed, g_packed] = run(packed);
  auto [loss_split, g_split] = run(split);
  // Two float32 evaluations with different reduction lengths (rows of 22 vs 13 tokens): each
  // within the float32 noise of the reference's full fine-tuning loss and gradients (the same
  // model), so their difference within twice the largest of those.
  double grad_noise = 0;
  for (const auto& [name, value] : noise()["full"].items()) grad_noise = std::max(grad_noise, value.get<double>());
  EXPECT_TRUE(within("loss: relative difference", std::abs(loss_packed - loss_split) / std::abs(loss_split),
                     2 * noise_tolerance(noise()["full"]["loss"].get<double>())));
  double worst = 0;
  for (std::size_t i = 0; i < g_packed.size(); ++i) worst = std::max(worst, relative_error(g_packed[i], g_split[i]));
  EXPECT_TRUE(within("gradients, worst tensor: relative difference", worst, 2 * noise_tolerance(grad_noise)));
}

// batch 8 x accumulation 1 == batch 2 x accumulation 4, with samples of very different target
// counts (token-correct normalisation, not a mean of micro-batch means).
TEST(TrainLoss, AccumulationIsExact) {
  at::manual_seed(3);
  std::vector<at::Tensor> ids, labels;
  for (int i = 0; i < 8; ++i) {
    const std::int64_t len = 4 + 5 * i;  // 4 .. 39 tokens
    auto x = at::randint(0, 96, {len}, at::kLong);
    auto l = x.clone();
    l.narrow(0, 0, 1 + (i % 3) * len / 4).fill_(data::kIgnoreIndex);  // masked prompts of different sizes
    ids.push_back(x);
    labels.push_back(l);
  }
  auto make = [&](std::size_t first, std::size_t count) {
    std::int64_t T = 0;
    for (std::size_t i = first; i < first + count; ++i) T = std::max(T, ids[i].size(0));
    train::TensorBatch b;
    const auto rows = static_cast<std::int64_t>(count);
    b.input_ids = at::zeros({rows, T}, at::kLong);
    b.labels = at::full({rows, T}, data::kIgnoreIndex, at::kLong);
    b.segment_ids = at::zeros({rows, T}, at::kInt);
    b.position_ids = at::arange(T).repeat({rows, 1});
    for (std::size_t i = 0; i < count; ++i) {
      const auto n = ids[first + i].size(0);
      b.input_ids[i].narrow(0, 0, n).copy_(ids[first + i]);
      b.labels[i].narrow(0, 0, n).copy_(labels[first + i]);
      b.segment_ids[i].narrow(0, 0, n).fill_(1);
    }
    b.target_tokens = (b.labels.narrow(1, 1, T - 1) != data::kIgnoreIndex).sum().item<std::int64_t>();
    return b;
  };
  auto trajectory = [&](std::vector<train::TensorBatch> batches, std::int64_t accum) {
    auto lm = model::load_causal_lm(kRef / "model", at::kFloat);
    peft::enable_full_finetune(lm);
    train::OptimizerOptions oo;
    std::vector<std::pair<std::string, at::Tensor>> trainable;
    for (const auto& item : lm->named_parameters(true)) trainable.emplace_back(item.key(), item.value());
    auto opt = train::make_optimizer(train::make_param_groups(trainable, oo), oo);
    train::TrainerOptions to;
    to.max_steps = 4;
    to.grad_accum = accum;
    to.clip_grad_norm = 1.0;
    to.schedule = {"constant", 5e-3, 0, 4, 0.0};
    CyclingSource source(std::move(batches));
    const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / ("accum-" + std::to_string(accum));
    fs::remove_all(out);
    fs::create_directories(out);
    {
      train::MetricsLog metrics(out);
      train::Trainer(lm, *opt, source, {}, to, &metrics).run();
    }
    std::vector<double> losses;
    std::ifstream in(out / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) losses.push_back(Json::parse(line)["loss"].get<double>());
    return losses;
  };
  auto one = trajectory({make(0, 8)}, 1);
  auto four = trajectory({make(0, 2), make(2, 2), make(4, 2), make(6, 2)}, 4);
  ASSERT_EQ(one.size(), 4u);
  ASSERT_EQ(four.size(), 4u);
  // The same 4-step AdamW run summed in another order: within twice the float32 noise of the
  // reference's AdamW trajectory (same model, same optimizer).
  double worst = 0;
  for (std::size_t i = 0; i < one.size(); ++i) worst = std::max(worst, std::abs(one[i] - four[i]) / std::abs(four[i]));
  EXPECT_TRUE(within("loss, worst step: relative difference", worst, 2 * noise_tolerance(noise()["trajectory"].get<double>())));
  EXPECT_LT(one.back(), one.front());
}

}  // namespace
