#include "train/step/batches.h"

#include <algorithm>

#include "ops/device.h"

namespace ctune::train {

TensorBatch to_tensors(const data::Batch& b, const at::Device& device) {
  const std::vector<std::int64_t> shape = {b.rows, b.length};
  TensorBatch t;
  t.input_ids = ops::to_device(at::tensor(b.input_ids, at::kLong).view(shape), device);
  t.labels = ops::to_device(at::tensor(b.labels, at::kLong).view(shape), device);
  t.position_ids = ops::to_device(at::tensor(b.position_ids, at::kLong).view(shape), device);
  t.segment_ids = ops::to_device(at::tensor(b.segment_ids, at::kInt).view(shape), device);
  t.target_tokens = b.target_tokens();
  t.rows_per_group = b.rows_per_group;
  t.examples = b.examples;
  t.desirable = b.desirable;
  return t;
}

std::vector<TensorBatch> all_batches(const data::BatchPlan& plan, std::int64_t limit, const at::Device& device, bool eval_split) {
  std::vector<TensorBatch> out;
  const auto n = limit >= 0 ? std::min(limit, plan.size()) : plan.size();
  for (std::int64_t i = 0; i < n; ++i) {
    out.push_back(to_tensors(plan.batch(i), device));
    out.back().eval_split = eval_split;
  }
  return out;
}

data::Batch prompt_completion_rows(const std::vector<const std::vector<std::int32_t>*>& prompts,
                                   const std::vector<std::vector<std::int64_t>>& completions, const std::vector<bool>& trained,
                                   std::vector<std::int64_t> examples, std::int64_t pad_id) {
  const auto n = static_cast<std::int64_t>(prompts.size());
  std::int64_t length = 1;
  for (std::int64_t r = 0; r < n; ++r)
    length = std::max<std::int64_t>(length, static_cast<std::int64_t>(prompts[r]->size() + completions[r].size()));
  data::Batch b;
  b.rows = n, b.length = length;
  b.input_ids.assign(static_cast<std::size_t>(n * length), pad_id);
  b.labels.assign(b.input_ids.size(), data::kIgnoreIndex);
  b.position_ids.assign(b.input_ids.size(), 0);
  b.segment_ids.assign(b.input_ids.size(), 0);
  for (std::int64_t r = 0; r < n; ++r) {
    const bool learn = trained.empty() || trained[r];
    auto at = static_cast<std::size_t>(r * length);
    std::int64_t p = 0;
    for (const auto id : *prompts[r]) b.input_ids[at] = id, b.position_ids[at] = p++, b.segment_ids[at] = 1, ++at;
    for (const auto id : completions[r]) {
      b.input_ids[at] = id, b.position_ids[at] = p++, b.segment_ids[at] = 1;
      if (learn) b.labels[at] = id;
      ++at;
    }
  }
  b.examples = std::move(examples);
  return b;
}

TensorBatch idle_batch() {
  TensorBatch t;
  t.input_ids = at::zeros({1, 2}, at::kLong);
  t.labels = at::full({1, 2}, data::kIgnoreIndex, at::kLong);
  t.position_ids = at::arange(2, at::kLong).view({1, 2});
  t.segment_ids = at::ones({1, 2}, at::kInt);  // a real (if empty) document: padding-only rows mask everything
  t.target_tokens = 0;
  return t;
}

}  // namespace ctune::train
