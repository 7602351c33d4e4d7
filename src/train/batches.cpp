#include "train/batches.h"

namespace ctune::train {

TensorBatch to_tensors(const data::Batch& b) {
  const std::vector<std::int64_t> shape = {b.rows, b.length};
  TensorBatch t;
  t.input_ids = at::tensor(b.input_ids, at::kLong).view(shape);
  t.labels = at::tensor(b.labels, at::kLong).view(shape);
  t.position_ids = at::tensor(b.position_ids, at::kLong).view(shape);
  t.segment_ids = at::tensor(b.segment_ids, at::kInt).view(shape);
  t.target_tokens = b.target_tokens();
  return t;
}

std::vector<TensorBatch> all_batches(const data::BatchPlan& plan, std::int64_t limit) {
  std::vector<TensorBatch> out;
  const auto n = limit >= 0 ? std::min(limit, plan.size()) : plan.size();
  for (std::int64_t i = 0; i < n; ++i) out.push_back(to_tensors(plan.batch(i)));
  return out;
}

}  // namespace ctune::train
