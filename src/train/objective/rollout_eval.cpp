#include "train/objective/rollout_eval.h"

#include <algorithm>

#include "infer/sampling.h"

namespace ctune::train {

RolloutEval::RolloutEval(model::CausalLM policy, model::CausalLM reference, data::Examples prompts,
                         std::shared_ptr<const std::vector<OrderedJson>> records, const tok::Tokenizer& tokenizer, RolloutOptions options,
                         data::SamplerOptions sampler, std::int64_t max_batches)
    : policy_(std::move(policy)),
      reference_(std::move(reference)),
      prompts_(std::move(prompts)),
      records_(std::move(records)),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      sampler_(std::move(sampler)),
      max_batches_(max_batches) {
  sampler_.shuffle = false;
  options_.objective.num_iterations = 1;  // on-policy: the ratio is 1, no old log-probabilities kept
  options_.first_step = 0;
}

std::vector<TensorBatch> RolloutEval::batches() {
  data::Sampler sampler(prompts_, sampler_);
  std::int64_t total = sampler.batches_per_epoch();
  if (max_batches_ >= 0) total = std::min(total, max_batches_);
  const auto prompts = static_cast<std::int64_t>(prompts_->size()), size = sampler_.batch.batch_size;
  const std::int64_t per_generation = std::max<std::int64_t>(1, options_.grad_accum);

  // Each generation batch's figures, weighted by its completions (every figure but the longest
  // completion and the error counts is a mean over completions, or over groups of equal size);
  // the spreads of single functions and the times are the training steps' concern, left out.
  enum class Combine { kMean, kMax, kSum, kSkip };
  auto combine = [](const std::string& name) {
    auto ends = [&](const std::string& tail) { return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0; };
    if (name.rfind("time/", 0) == 0 || (name.rfind("rewards/", 0) == 0 && ends("/std"))) return Combine::kSkip;
    if (name == "completions/max_length") return Combine::kMax;
    return ends("/errors") ? Combine::kSum : Combine::kMean;
  };
  std::vector<std::pair<std::string, double>> totals;  // in the order the rollouts report them
  double weight = 0;
  std::vector<TensorBatch> out;
  for (std::int64_t first = 0; first < total; first += per_generation) {
    RolloutOptions o = options_;
    o.grad_accum = std::min(per_generation, total - first);
    // The same seeds at every evaluation, apart from training's (whose indices count from 0).
    o.seed = infer::stream_seed(options_.seed ^ 0x6576616c2d726cULL, static_cast<std::uint64_t>(first));
    RolloutSource rollouts(policy_, reference_, sampler, prompts_, records_, tokenizer_, o);
    for (std::int64_t k = 0; k < o.grad_accum; ++k) {
      out.push_back(rollouts.next());
      out.back().eval_split = true;
    }
    const double rows = static_cast<double>((std::min(prompts, (first + o.grad_accum) * size) - first * size) * o.objective.num_generations);
    for (const auto& [name, value] : rollouts.figures()) {
      const Combine how = combine(name);
      if (how == Combine::kSkip) continue;
      auto it = std::find_if(totals.begin(), totals.end(), [&](const auto& t) { return t.first == name; });
      if (it == totals.end()) it = totals.insert(totals.end(), {name, 0.0});
      it->second = how == Combine::kMax ? std::max(it->second, value) : it->second + (how == Combine::kSum ? value : value * rows);
    }
    weight += rows;
  }
  figures_.clear();
  for (const auto& [name, value] : totals) figures_.emplace_back(name, combine(name) == Combine::kMean ? value / std::max(1.0, weight) : value);
  return out;
}

}  // namespace ctune::train
