#include "train/step/batches.h"

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
