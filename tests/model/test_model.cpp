// The model against an independent PyTorch reference (make_reference.py): per-token NLL within
// kNoiseFactor times the float32 noise of those NLLs (2.4e-6 to 7.7e-6, measured by the script;
// docs/testing.md) and identical argmax at 160 tokens, for 7 tiny checkpoints (MHA/GQA, tied,
// head_dim != H/heads, llama3 and linear RoPE, Qwen2 biases, Llama biases, bf16/fp16/fp32
// storage, a sharded checkpoint). The argmax is well defined: the script draws sequences whose
// top-two logits are at least 1e-4 apart at every position, far above the float32 noise. Also:
// padding masks, save/load round trips, zero-copy loading, bf16 compute.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/json.h"
#include "infer/score.h"
#include "io/hf_checkpoint.h"
#include "io/tensor_io.h"
#include "model/moe.h"
#include "model/decoder.h"
#include "model/parameter_shapes.h"
#include "model/weights.h"
#include "margins.h"

namespace fs = std::filesystem;
using namespace ctune;
using ctune::test::noise_tolerance;
using ctune::test::within;

namespace {

const fs::path kModels = fs::path(CTUNE_TEST_DATA_DIR) / "models";

struct Reference {
  std::vector<std::int64_t> ids;
  std::vector<double> nll;
  std::vector<std::int64_t> argmax;
  double nll_noise = 0;  // largest |dNLL| float32 rounding alone causes (make_reference.py)
};

Reference read_reference(const std::string& name) {
  Json j = read_json_file(kModels / (name + ".reference.json"));
  return {j["ids"].get<std::vector<std::int64_t>>(), j["nll"].get<std::vector<double>>(),
          j["argmax"].get<std::vector<std::int64_t>>(), j["nll_fp32_noise"].get<double>()};
}

const std::vector<std::string> kCases = {"llama_mha_fp32",      "llama_gqa_tied_bf16",  "llama_headdim_bias",
                                         "llama3_rope",         "qwen2_bias",           "llama_sharded_linear",
                                         "mistral_fp16",        "qwen3_gqa_tied_bf16",  "qwen3_bias_untied_fp32",
                                         "mistral_window_bf16", "qwen2_window_layers",  "qwen3_layer_types",
                                         "smollm3_nope_bf16",   "smollm3_list_bias_fp32", "gemma2_caps_window_bf16",
                                         "gemma2_defaults_untied_fp32", "gemma3_pattern_bf16", "gemma3_v5_untied_fp32",
                                         "gemma3_wrapper_tied_bf16", "gemma3_wrapper_untied_fp32",
                                         "phi3_longrope_partial_fp32", "phi3_short_tied_bf16",
                                         "mixtral_untied_fp32", "mixtral_window_tied_bf16", "qwen3_moe_dense_tied_bf16",
                                         "qwen3_moe_norm_step_untied_fp32", "qwen3_moe_stacked_fp32",
                                         "qwen3_5_text_fp32",   "qwen3_5_tied_bf16",    "qwen3_5_moe_fp32",
                                         "qwen3_5_moe_wrapper_bf16", "qwen3_next_fp32", "gpt_oss_fp32",
                                         "gpt_oss_mxfp4_bf16"};

class ReferenceCase : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceCase, Fp32ForwardMatchesReference) {
  const auto ref = read_reference(GetParam());
  ASSERT_GE(ref.ids.size(), 128u);
  auto lm = model::load_causal_lm(kModels / GetParam(), at::kFloat);
  auto got = infer::score_tokens(lm, ref.ids, GetParam());
  ASSERT_EQ(got.nll.size(), ref.nll.size());
  double worst = 0;
  for (std::size_t t = 0; t < ref.nll.size(); ++t) worst = std::max(worst, std::abs(got.nll[t] - ref.nll[t]));
  EXPECT_TRUE(within(GetParam() + ": max |dNLL| over " + std::to_string(ref.nll.size()) + " positions", worst,
                     noise_tolerance(ref.nll_noise)));
  EXPECT_EQ(got.argmax, ref.argmax);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, ReferenceCase, ::testing::ValuesIn(kCases));

// Left padding plus an attention mask must leave the real tokens' outputs unchanged.
TEST(Model, LeftPaddedBatchMatchesReference) {
  for (const std::string name : {"llama_gqa_tied_bf16", "qwen2_bias"}) {
    const auto ref = read_reference(name);
    auto lm = model::load_causal_lm(kModels / name, at::kFloat);
    const std::int64_t T = static_cast<std::int64_t>(ref.ids.size()), pad = 37, short_len = T - pad;
    auto ids = at::zeros({2, T}, at::kLong);
    auto mask = at::ones({2, T}, at::kLong);
    ids[0] = at::tensor(ref.ids, at::kLong);
    // Row 1: `pad` padding tokens (id 5, masked), then the first short_len reference tokens.
    ids[1].fill_(5);
    ids[1].narrow(0, pad, short_len).copy_(at::tensor(ref.ids, at::kLong).narrow(0, 0, short_len));
    mask[1].narrow(0, 0, pad).zero_();
    at::NoGradGuard no_grad;
    auto logp = at::log_softmax(lm->forward(ids, mask).to(at::kDouble), -1);
    double full_row = 0, padded_row = 0;
    for (std::int64_t t = 0; t + 1 < T; ++t)
      full_row = std::max(full_row, std::abs(-logp[0][t][ref.ids[t + 1]].item<double>() - ref.nll[t]));
    for (std::int64_t t = 0; t + 1 < short_len; ++t)
      padded_row = std::max(padded_row, std::abs(-logp[1][pad + t][ref.ids[t + 1]].item<double>() - ref.nll[t]));
    EXPECT_TRUE(within(name + ": full row: max |dNLL|", full_row, noise_tolerance(ref.nll_noise)));
    EXPECT_TRUE(within(name + ": left-padded row: max |dNLL|", padded_row, noise_tolerance(ref.nll_noise)));
  }
}

// The file mapping (from /proc/self/maps) that holds `address`, or "" when it is heap memory.
std::string mapping_of(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  while (std::getline(maps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || a < lo || a >= hi) continue;
    auto slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "";
}

TEST(Model, LoadBorrowsMappedBytesWhenDtypeMatches) {
  auto lm = model::load_causal_lm(kModels / "llama_mha_fp32", at::kFloat);
  auto& w = lm->model->layers[0]->as<model::DecoderLayer>()->mlp->up_proj->weight;
  EXPECT_EQ(mapping_of(w.data_ptr()), (kModels / "llama_mha_fp32" / "model.safetensors").string())
      << "an fp32 checkpoint loaded as fp32 should be used in place, not copied";
  // A converted load (fp32 -> bf16) owns fresh memory holding the rounded values.
  auto bf = model::load_causal_lm(kModels / "llama_mha_fp32", at::kBFloat16);
  auto& wb = bf->model->layers[0]->as<model::DecoderLayer>()->mlp->up_proj->weight;
  EXPECT_EQ(mapping_of(wb.data_ptr()), "");
  EXPECT_EQ(wb.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(wb, w.to(at::kBFloat16)));
}

// A Gemma 3 multimodal checkpoint is read as its text model and written as one: config.json a
// gemma3_text config (no text_config, Gemma3ForCausalLM), tensors under the text model's names,
// no vision tensors; the written model scores exactly as the wrapper did.
TEST(Model, Gemma3WrapperIsWrittenAsItsTextModel) {
  for (const std::string name : {"gemma3_wrapper_tied_bf16", "gemma3_wrapper_untied_fp32"}) {
    auto lm = model::load_causal_lm(kModels / name, at::kFloat);
    EXPECT_EQ(lm->config().model_type, "gemma3_text");
    EXPECT_EQ(lm->config().wrapper_type, "gemma3");
    const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / ("rewritten_" + name);
    model::SaveOptions opts;
    opts.overwrite = true;
    model::save_causal_lm(lm, out, opts);
    const Json config = read_json_file(out / "config.json");
    EXPECT_EQ(config["model_type"], "gemma3_text") << name;
    EXPECT_FALSE(config.contains("text_config")) << name;
    EXPECT_EQ(config["architectures"][0], "Gemma3ForCausalLM") << name;
    io::CheckpointReader written(out);
    for (const auto& [tensor, ref] : written.tensors())
      EXPECT_TRUE(tensor.rfind("model.layers.", 0) == 0 || tensor.rfind("model.", 0) == 0 || tensor == "lm_head.weight") << tensor;
    const auto ref = read_reference(name);
    auto again = model::load_causal_lm(out, at::kFloat);
    EXPECT_TRUE(again->config().wrapper_type.empty());
    EXPECT_EQ(infer::score_tokens(again, ref.ids, name).nll, infer::score_tokens(lm, ref.ids, name).nll) << name;
  }
}

// Experts are written back in the layout they were read in: stacked (transformers v5:
// mlp.experts.gate_up_proj [E, 2 I, H], mlp.experts.down_proj [E, H, I]) or one module per
// expert (Mixtral's block_sparse_moe.experts.N.w1), byte for byte the tensors that were read.
TEST(Model, ExpertsAreWrittenInTheLayoutRead) {
  for (const std::string name : {"qwen3_moe_stacked_fp32", "mixtral_untied_fp32"}) {
    const bool stacked = name == "qwen3_moe_stacked_fp32";
    auto lm = model::load_causal_lm(kModels / name, at::kFloat);
    EXPECT_EQ(lm->config().stacked_experts, stacked ? "mlp" : "") << name;
    const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / ("rewritten_" + name);
    model::SaveOptions opts;
    opts.overwrite = true;
    model::save_causal_lm(lm, out, opts);
    io::CheckpointReader before(kModels / name), after(out);
    ASSERT_EQ(after.tensors().size(), before.tensors().size()) << name;
    for (const auto& [tensor, ref] : before.tensors()) {
      const auto* got = after.find(tensor);
      ASSERT_NE(got, nullptr) << name << ": " << tensor << " not written";
      EXPECT_TRUE(at::equal(io::load_tensor(*got->file, *got->info, at::kFloat), io::load_tensor(*ref.file, *ref.info, at::kFloat)))
          << name << ": " << tensor;
    }
    const auto ref = read_reference(name);
    auto again = model::load_causal_lm(out, at::kFloat);
    EXPECT_EQ(infer::score_tokens(again, ref.ids, name).nll, infer::score_tokens(lm, ref.ids, name).nll) << name;
  }
}

// The routers' auxiliary loss and z-loss over a masked sequence, and the gradient of each on
// every sparse layer's router weight (passed in the layer's own backward, model/moe.h), against
// transformers' load_balancing_loss_func and router_z_loss_func over the same mask in float64
// (make_reference.py aux_reference): within the float32 noise of each, and the losses within
// 1e-6 relative.
TEST(Model, RouterAuxAndZLossesMatchReference) {
  for (const std::string name :
       {"mixtral_window_tied_bf16", "qwen3_moe_dense_tied_bf16", "qwen3_moe_norm_step_untied_fp32", "qwen3_next_fp32"}) {
    const Json j = read_json_file(kModels / (name + ".reference.json"));
    for (const std::string loss : {"aux", "z"}) {
      auto lm = model::load_causal_lm(kModels / name, at::kFloat);
      for (auto& p : lm->parameters()) p.set_requires_grad(true);
      lm->train();
      auto& record = *lm->model->router_record;
      record.z_loss_trains = loss == "z";
      model::ForwardInputs in;
      in.input_ids = at::tensor(j["ids"].get<std::vector<std::int64_t>>()).unsqueeze(0);
      in.router_mask = at::tensor(j["aux_mask"].get<std::vector<double>>()).unsqueeze(0);
      auto hidden = lm->hidden(in);
      const double ref = j[loss + "_loss"].get<double>();
      const double rel = std::abs((loss == "aux" ? record.aux_loss() : record.z_loss()) - ref) / ref;
      EXPECT_TRUE(within(name + ": " + loss + " loss, relative error", rel, noise_tolerance(j[loss + "_loss_fp32_noise"].get<double>())));
      EXPECT_LT(rel, 1e-6) << name << " " << loss;
      record.arm(loss == "aux" ? 1.0 : 0.0, loss == "z" ? 1.0 : 0.0);
      (hidden * 0.0).sum().backward();  // only the routers' loss gradient is non-zero
      const auto params = lm->named_parameters();
      for (const auto& [gate, values] : j[loss + "_grads"].items()) {
        const at::Tensor got = params[gate].grad().to(at::kDouble);
        const at::Tensor want = at::tensor(values.get<std::vector<double>>(), at::kDouble).reshape(got.sizes());
        const double err = ((got - want).norm() / want.norm()).item<double>();
        EXPECT_TRUE(within(name + ": d " + loss + " / d " + gate + ", relative norm", err,
                           noise_tolerance(j[loss + "_grads_fp32_noise"][gate].get<double>())));
      }
    }
  }
}

// The model's first sparse MoE block (null if none), its parameters training.
static model::SparseMoe first_expert_block(const model::CausalLM& lm) {
  model::SparseMoe moe{nullptr};
  for (const auto& layer : *lm->model->layers)
    if (moe.is_empty()) moe = layer->as<model::DecoderLayer>()->moe;
  if (!moe.is_empty())
    for (auto& p : moe->parameters()) p.set_requires_grad(true);
  return moe;
}

// Reduced-precision expert GEMMs on CPU run on padded row counts (model/moe.h): the padding
// rows read a zero row and are added with weight 0, so the layer's output and every gradient
// are the unpadded layer's up to the GEMMs' own rounding (fp32 here, both paths forced): a GEMM
// may order its sums differently for another row count, which moves a result by at most its
// length (K or, for a weight's gradient, the rows M ≤ 600) times fp32's unit roundoff, through
// the expert's three chained GEMMs. A row sent to the wrong token or expert moves it by O(1).
TEST(Model, PaddedExpertRowsChangeOnlyTheGemmShapes) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t m = 0; m < 3000; ++m) sizes.push_back(m);
  const auto padded = model::padded_expert_rows(sizes);
  std::set<std::int64_t> distinct(padded.begin(), padded.end());
  for (std::int64_t m = 0; m < 3000; ++m) {
    const auto p = padded[static_cast<std::size_t>(m)];
    if (m < 32) EXPECT_EQ(p, m);
    EXPECT_GE(p, m);
    EXPECT_LT(16 * (p - m), std::max<std::int64_t>(m, 1)) << m << " -> " << p;
  }
  EXPECT_LE(distinct.size(), 32u + 16u * 7u);  // 0..31, then at most 16 per octave up to 4096

  auto lm = model::load_causal_lm(kModels / "qwen3_moe_norm_step_untied_fp32", at::kFloat);
  model::SparseMoe moe = first_expert_block(lm);
  ASSERT_FALSE(moe.is_empty());
  at::manual_seed(0);
  const auto x0 = at::randn({2, 300, lm->config().hidden_size});
  struct Run {
    at::Tensor y, dx;
    std::vector<at::Tensor> grads;
  };
  const auto run = [&](model::SparseMoeImpl::RowPadding padding) {
    moe->row_padding = padding;
    moe->zero_grad();
    auto x = x0.clone().requires_grad_(true);
    Run r;
    r.y = moe->forward(x);
    (r.y * at::cos(at::arange(r.y.numel()).reshape(r.y.sizes()).to(at::kFloat))).sum().backward();
    r.dx = x.grad();
    for (const auto& p : moe->parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    return r;
  };
  const auto rel = [](const at::Tensor& a, const at::Tensor& b) {
    return ((a - b).norm() / std::max(b.norm().item<double>(), 1e-30)).item<double>();
  };
  const Run plain = run(model::SparseMoeImpl::RowPadding::kNever);
  const Run padded_run = run(model::SparseMoeImpl::RowPadding::kAlways);
  {  // the routing of x0 does pad: some expert's row count is not a multiple of its quantum
    at::NoGradGuard no_grad;
    const auto chosen = std::get<1>(moe->gate->forward(x0.reshape({-1, x0.size(-1)})).topk(moe->top_k, -1));
    const auto counts = at::bincount(chosen.reshape({-1}), {}, static_cast<std::int64_t>(moe->experts->size()));
    const std::vector<std::int64_t> routed(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + counts.numel());
    ASSERT_NE(model::padded_expert_rows(routed), routed);
  }
  const double kBound = 3 * 600 * std::ldexp(1.0, -24);
  EXPECT_TRUE(within("padded vs unpadded experts: output, relative norm", rel(padded_run.y, plain.y), kBound));
  EXPECT_TRUE(within("padded vs unpadded experts: input gradient, relative norm", rel(padded_run.dx, plain.dx), kBound));
  const auto names = moe->named_parameters().keys();
  for (std::size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_TRUE(within("padded vs unpadded experts: d/d " + names[i] + ", relative norm", rel(padded_run.grads[i], plain.grads[i]), kBound));
  moe->row_padding = model::SparseMoeImpl::RowPadding::kAuto;
}

namespace {
// Every CPU tensor's bytes while installed (sizes of all kinds, where the tensor pool sees only
// blocks from 256 KiB): what a forward keeps alive is what it allocated and did not free.
class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    void* p = c10::alloc_cpu(n);
    std::lock_guard<std::mutex> lock(mutex());
    sizes()[p] = n;
    live() += static_cast<std::int64_t>(n);
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  static std::int64_t& live() { static std::int64_t bytes = 0; return bytes; }

 private:
  static void release(void* p) {
    {
      std::lock_guard<std::mutex> lock(mutex());
      const auto it = sizes().find(p);
      if (it != sizes().end()) {
        live() -= static_cast<std::int64_t>(it->second);
        sizes().erase(it);
      }
    }
    c10::free_cpu(p);
  }
  static std::mutex& mutex() { static std::mutex m; return m; }
  static std::unordered_map<void*, size_t>& sizes() { static std::unordered_map<void*, size_t> m; return m; }
};
}  // namespace

// What a sparse MoE block keeps from forward to backward, counted by an allocator that sees
// every tensor, against the ledger's term for it (SparseMoeImpl::saved_activations): full
// fine-tuning (router and experts train), fp32, unpadded and padded row counts. The term omits
// only index tensors of a few bytes a row; a tensor of k n H it misses (LibTorch's index_add
// kept its source: 20% of the block on the bench shape) fails it.
TEST(Model, ExpertBlockKeepsWhatTheLedgerCounts) {
  auto lm = model::load_causal_lm(kModels / "qwen3_moe_norm_step_untied_fp32", at::kFloat);
  const auto& config = lm->config();
  model::SparseMoe moe = first_expert_block(lm);
  ASSERT_FALSE(moe.is_empty());
  at::manual_seed(0);
  const std::int64_t B = 2, T = 300, H = config.hidden_size, n = B * T;
  const auto x0 = at::randn({B, T, H});
  static CountingAllocator counting;
  for (const bool padded : {false, true}) {
    moe->row_padding = padded ? model::SparseMoeImpl::RowPadding::kAlways : model::SparseMoeImpl::RowPadding::kNever;
    auto* before = c10::GetCPUAllocator();
    c10::SetCPUAllocator(&counting, /*priority=*/10);
    const std::int64_t start = CountingAllocator::live();
    at::Tensor y;
    {
      auto x = x0 * 1.0f;  // the block's input, kept by the block alone (as the layer's norm output is)
      y = moe->forward(x.set_requires_grad(true));
    }
    const std::int64_t kept = CountingAllocator::live() - start - static_cast<std::int64_t>(y.nbytes());
    y = at::Tensor();
    c10::SetCPUAllocator(before, /*priority=*/10);

    model::ActivationShape s;
    s.B = Term::num(B), s.T = Term::num(T), s.n = Term::num(n), s.H = Term::num(H);
    s.c = s.r = Term::num(4);
    s.padded_expert_rows = padded;
    s.projection_input = [&](const std::string&, const Term& in_dim) { return s.c * s.n * in_dim; };
    const std::int64_t predicted = model::SparseMoeImpl::saved_activations(config, s).saved.value();
    // The padding term is the expected one at the mean load, the routing's own within a
    // quantum per expert: 16 experts x 2 rows x (H + 3 I_e + 1) x 4 bytes.
    const std::int64_t slack = predicted / 50 + (padded ? 16 * 2 * (H + 3 * 16 + 1) * 4 : 0);
    EXPECT_TRUE(within(std::string(padded ? "padded" : "unpadded") + " expert block: |kept - the ledger's term| bytes (kept " +
                           std::to_string(kept) + ", term " + std::to_string(predicted) + ")",
                       std::abs(static_cast<double>(kept - predicted)), static_cast<double>(slack)));
  }
  moe->row_padding = model::SparseMoeImpl::RowPadding::kAuto;
}

TEST(Model, SaveShardedRoundTripIsExact) {
  const fs::path out = fs::path(CTUNE_TEST_DATA_DIR) / "roundtrip_gqa_tied";
  fs::remove_all(out);
  auto lm = model::load_causal_lm(kModels / "llama_gqa_tied_bf16", at::kBFloat16);
  model::SaveOptions opts;
  opts.max_shard_bytes = 20'000;  // forces several shards
  model::save_causal_lm(lm, out, opts);

  Json index = read_json_file(out / "model.safetensors.index.json");
  const auto& wm = index["weight_map"];
  EXPECT_FALSE(wm.contains("lm_head.weight")) << "tied head must not be saved";
  std::set<std::string> shards;
  for (auto it = wm.begin(); it != wm.end(); ++it) shards.insert(it->get<std::string>());
  ASSERT_GT(shards.size(), 1u);
  const std::string last = *shards.rbegin();
  char expect[64];
  std::snprintf(expect, sizeof(expect), "model-%05zu-of-%05zu.safetensors", shards.size(), shards.size());
  EXPECT_EQ(last, expect);
  std::uint64_t total = 0;
  io::CheckpointReader reread(out);
  for (const auto& [name, ref] : reread.tensors()) total += ref.info->nbytes();
  EXPECT_EQ(index["metadata"]["total_size"].get<std::uint64_t>(), total);

  auto back = model::load_causal_lm(out, at::kBFloat16);
  auto a = model::hf_state_dict(lm), b = model::hf_state_dict(back);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
  }
  EXPECT_EQ(model::load_model_config(out).dtype, "bfloat16");
}

// bf16 compute against the float64 reference: the mean |dNLL| within 3 times the estimate for a
// forward whose matmuls round operands and results to bf16 (low_precision_nll_estimate in
// margins.h), computed here from this model's own logits.
TEST(Model, Bf16ComputeStaysClose) {
  const std::string name = "llama_gqa_tied_bf16";
  const auto ref = read_reference(name);
  auto lm = model::load_causal_lm(kModels / name, at::kBFloat16);
  auto got = infer::score_tokens(lm, ref.ids, "bf16");
  double mean_err = 0;
  for (std::size_t t = 0; t < ref.nll.size(); ++t) mean_err += std::abs(got.nll[t] - ref.nll[t]);
  mean_err /= static_cast<double>(ref.nll.size());

  auto fp32 = model::load_causal_lm(kModels / name, at::kFloat);
  at::NoGradGuard no_grad;
  const auto logits = fp32->forward(at::tensor(ref.ids, at::kLong).view({1, -1})).squeeze(0).to(at::kDouble);
  const double spread = (logits - logits.mean(-1, /*keepdim=*/true)).pow(2).mean().sqrt().item<double>();
  const double estimate = ctune::test::low_precision_nll_estimate(
      ctune::test::kUnitRoundoffBf16, ctune::test::llama_matmuls(fp32->config().num_hidden_layers), spread);
  EXPECT_TRUE(within("bf16 compute vs float64: mean |dNLL| (estimate " + std::to_string(estimate) + ")", mean_err,
                     3 * estimate));
}

TEST(Model, RefusesWhatItCannotHonour) {
  auto lm = model::load_causal_lm(kModels / "llama_mha_fp32", at::kFloat);
  EXPECT_THROW(infer::score_tokens(lm, {1, 2, 300}, "ids"), ConfigError);  // vocab is 300
  EXPECT_THROW(infer::score_tokens(lm, {}, "ids"), ConfigError);
}

TEST(Model, ShapeMismatchNamesTensorAndFile) {
  // Load a checkpoint into a model whose config disagrees: every problem is named.
  auto config = model::load_model_config(kModels / "llama_mha_fp32");
  config.intermediate_size = 96;
  model::CausalLM lm(config, at::kFloat);
  io::CheckpointReader checkpoint(kModels / "llama_mha_fp32");
  try {
    model::load_weights(lm, checkpoint);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("wrongly shaped"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.layers.0.mlp.down_proj.weight in model.safetensors (expected [64,96], found [64,128])"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
}

// Experts that do not match config.json are named, in either layout: a stacked tensor of the
// wrong shape by its stacked name, a missing expert by its module.
TEST(Model, ExpertMismatchNamesTheTensor) {
  const auto refused = [](const std::string& name, const std::function<void(model::ModelConfig&)>& change) {
    auto config = model::load_model_config(kModels / name);
    change(config);
    model::CausalLM lm(config, at::kFloat);
    io::CheckpointReader checkpoint(kModels / name);
    try {
      model::load_weights(lm, checkpoint);
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string msg = refused("qwen3_moe_stacked_fp32", [](model::ModelConfig& c) { c.arch.moe.intermediate = 20; });
  EXPECT_NE(msg.find("model.layers.0.mlp.experts.gate_up_proj in model.safetensors (expected [8,40,64], found [8,64,64])"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers.0.mlp.experts.down_proj in model.safetensors (expected [8,64,20], found [8,64,32])"),
            std::string::npos) << msg;
  msg = refused("mixtral_untied_fp32", [](model::ModelConfig& c) { c.arch.moe.experts = 5; });
  EXPECT_NE(msg.find("missing (model.layers.0.block_sparse_moe.experts.4.w1.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wrongly shaped (model.layers.0.block_sparse_moe.gate.weight"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(Model, ParameterCountIsTheShapeOnlyModels) {
  // Llama-3.2-1B's published shape: 1,235,814,400 parameters (tied head counted once); the
  // shape-only model reserves its 2.5 GB of bf16 storage without touching it.
  const auto l32 = model::parse_model_config(
      Json::parse(R"({"model_type":"llama","vocab_size":128256,"hidden_size":2048,"intermediate_size":8192,
        "num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":64,
        "tie_word_embeddings":true})"),
      "l32");
  const auto shapes = model::parameter_shapes(l32);
  EXPECT_EQ(model::parameter_count(shapes), 1235814400);
  EXPECT_EQ(shapes.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(shapes.front().module(), "embed_tokens");
  EXPECT_EQ(shapes.front().layer(), -1);
  const auto q = std::find_if(shapes.begin(), shapes.end(), [](const auto& s) { return s.name == "model.layers.15.self_attn.q_proj.weight"; });
  ASSERT_NE(q, shapes.end());
  EXPECT_EQ(q->module(), "q_proj");
  EXPECT_EQ(q->layer(), 15);
  EXPECT_TRUE(q->is_weight());
  EXPECT_EQ(q->sizes, (std::vector<std::int64_t>{2048, 2048}));
  // The shipped Gemma shapes against their published counts: Gemma-2-2B 2,614,341,888 and
  // Gemma-3-1B 999,885,952 (tied, four norms a layer, Gemma 3's q/k norms), and Gemma-3-4B's text
  // model, 3,880,263,168 (the wrapper's text_config with Gemma3TextConfig's defaults); Phi-4-mini
  // 3,836,021,760 (fused qkv_proj 5120 rows, gate_up_proj 16384, tied).
  for (const auto& [file, count] : std::vector<std::pair<std::string, std::int64_t>>{
           {"gemma-2-2b.json", 2614341888}, {"gemma-3-1b.json", 999885952}, {"gemma-3-4b.json", 3880263168},
           {"phi-4-mini.json", 3836021760}}) {
    const auto path = fs::path(CTUNE_SOURCE_DIR) / "recipes" / "models" / file;
    EXPECT_EQ(model::parameter_count(model::parameter_shapes(model::parse_model_config(read_json_file(path), file))), count) << file;
  }
}

}  // namespace
