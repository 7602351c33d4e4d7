#include "reference_io.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "data/example.h"
#include "io/safetensors.h"
#include "io/tensor_io.h"
#include "model/weights.h"
#include "peft/lora.h"
#include "margins.h"

namespace ctune::test {

std::map<std::string, at::Tensor> read_tensors(const std::filesystem::path& path) {
  auto file = io::SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& t : file->header().tensors) out[t.name] = io::load_tensor(*file, t, at::kFloat).clone();
  return out;
}

model::CausalLM lora_policy(const std::filesystem::path& dir) {
  auto lm = model::load_causal_lm(dir / "model", at::kFloat);
  peft::LoraOptions o;
  o.rank = 4;
  o.alpha = 8.0;
  o.targets = {"all-linear", "lm_head"};
  peft::apply_lora(lm, o);
  const auto weights = read_tensors(dir / "lora.safetensors");
  if (copy_into(lm, weights) != weights.size()) throw std::runtime_error(dir.string() + ": not every LoRA weight found a parameter");
  return lm;
}

std::size_t copy_into(model::CausalLM& lm, const std::map<std::string, at::Tensor>& weights) {
  at::NoGradGuard no_grad;
  std::size_t set = 0;
  for (auto& item : lm->named_parameters(true)) {
    auto it = weights.find(item.key());
    if (it == weights.end()) continue;
    item.value().copy_(it->second);
    ++set;
  }
  return set;
}

std::pair<model::CausalLM, model::CausalLM> policy_and_reference(const std::filesystem::path& dir, const std::string& kind) {
  if (kind != "full") return {lora_policy(dir), model::CausalLM(nullptr)};
  auto policy = model::load_causal_lm(dir / "policy", at::kFloat);
  peft::enable_full_finetune(policy);
  auto reference = model::load_causal_lm(dir / "model", at::kFloat);
  for (auto& p : reference->parameters()) p.requires_grad_(false);
  reference->eval();
  return {policy, reference};
}

void expect_objective_matches(const std::filesystem::path& dir, const std::string& name, model::CausalLM& policy,
                              const train::Objective& objective, const train::ObjectiveTerms& terms, double units, double token_units,
                              double loss, const Json& expected, const Json& noise) {
  auto scalar = [&](const std::string& key, double ours) {
    EXPECT_TRUE(within(name + " " + key + ": absolute error", std::abs(ours - expected.at(key).get<double>()),
                       noise_tolerance(noise.at(key).get<double>())));
  };
  scalar("loss", loss);
  const auto means = train::metric_means(objective, terms.metric_sums, units, token_units);
  // Every figure reported is compared, and every one the reference has is reported (an
  // objective may keep sums it does not report: KTO's counts).
  for (const auto& [metric, value] : means) scalar(metric, value);
  for (const auto& [key, value] : expected.items()) {
    if (!noise.contains(key) || key == "loss") continue;
    EXPECT_TRUE(std::any_of(means.begin(), means.end(), [&](const auto& m) { return m.first == key; })) << name << ": " << key << " not reported";
  }

  const auto grads = read_tensors(dir / ("grads_" + name + ".safetensors"));
  std::size_t checked = 0;
  for (const auto& item : policy->named_parameters(true)) {
    if (!item.value().requires_grad()) {
      EXPECT_FALSE(item.value().grad().defined()) << item.key();
      continue;
    }
    auto it = grads.find(item.key());
    ASSERT_NE(it, grads.end()) << "no reference gradient for " << item.key();
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(within(name + " " + item.key() + " gradient: relative error", relative_error(item.value().grad(), it->second),
                       noise_tolerance(noise.at(item.key()).get<double>())));
    ++checked;
  }
  EXPECT_EQ(checked, grads.size());
}

train::TensorBatch batch_from_json(const Json& b) {
  auto t = [&](const char* key, at::ScalarType type) {
    auto rows = b[key].get<std::vector<std::vector<std::int64_t>>>();
    auto x = at::empty({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(rows[0].size())}, at::kLong);
    for (std::size_t r = 0; r < rows.size(); ++r) x[r] = at::tensor(rows[r], at::kLong);
    return x.to(type);
  };
  train::TensorBatch tb;
  tb.input_ids = t("ids", at::kLong);
  tb.labels = t("labels", at::kLong);
  tb.position_ids = t("pos", at::kLong);
  tb.segment_ids = t("seg", at::kInt);
  tb.target_tokens = (tb.labels.narrow(1, 1, tb.labels.size(1) - 1) != data::kIgnoreIndex).sum().item<std::int64_t>();
  return tb;
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double denom = b.to(at::kDouble).norm().item<double>();
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / std::max(denom, 1e-30);
}

}  // namespace ctune::test
