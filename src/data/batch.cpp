// Row planning and collation; see batch.h.
#include "data/batch.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace ctune::data {

std::int64_t Batch::target_tokens() const {
  std::int64_t n = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t t = 0; t + 1 < length; ++t)
      if (labels[static_cast<std::size_t>(r * length + t + 1)] != kIgnoreIndex) ++n;
  return n;
}

Batch Batch::slice_rows(std::int64_t begin, std::int64_t end) const {
  Batch out;
  out.rows = end - begin;
  out.length = length;
  const auto from = static_cast<std::ptrdiff_t>(begin * length), to = static_cast<std::ptrdiff_t>(end * length);
  out.input_ids.assign(input_ids.begin() + from, input_ids.begin() + to);
  out.labels.assign(labels.begin() + from, labels.begin() + to);
  out.position_ids.assign(position_ids.begin() + from, position_ids.begin() + to);
  out.segment_ids.assign(segment_ids.begin() + from, segment_ids.begin() + to);
  return out;
}

BatchPlan::BatchPlan(const std::vector<Example>& examples, const std::vector<std::int64_t>& order,
                     const BatchOptions& options)
    : examples_(&examples), options_(options), order_(order) {
  if (options.batch_size < 1) throw ConfigError("batch_size: expected at least 1, found " + std::to_string(options.batch_size));
  row_begin_.reserve(order_.size() + 1);
  if (!options.packing) {
    for (std::size_t k = 1; k <= order_.size(); ++k) row_begin_.push_back(static_cast<std::int64_t>(k));
    return;
  }
  std::int64_t used = 0;
  for (std::size_t k = 0; k < order_.size(); ++k) {
    const auto& ex = examples[static_cast<std::size_t>(order_[k])];
    const auto len = static_cast<std::int64_t>(ex.ids.size());
    if (len > options.max_seq_len)
      throw ShapeError("packing: example " + std::to_string(order_[k]) + " has " + std::to_string(len) +
                       " tokens, more than max_seq_len " + std::to_string(options.max_seq_len));
    if (used > 0 && used + len > options.max_seq_len) {
      row_begin_.push_back(static_cast<std::int64_t>(k));
      used = 0;
    }
    used += len;
  }
  if (!order_.empty()) row_begin_.push_back(static_cast<std::int64_t>(order_.size()));
}

std::int64_t BatchPlan::size() const {
  return (num_rows() + options_.batch_size - 1) / options_.batch_size;
}

Batch BatchPlan::batch(std::int64_t index) const {
  if (index < 0 || index >= size())
    throw ShapeError("batch index " + std::to_string(index) + " out of range (plan has " + std::to_string(size()) +
                     " batches)");
  const std::int64_t first_row = index * options_.batch_size;
  const std::int64_t last_row = std::min(first_row + options_.batch_size, num_rows());
  auto example = [&](std::int64_t k) -> const Example& {
    return (*examples_)[static_cast<std::size_t>(order_[static_cast<std::size_t>(k)])];
  };
  Batch b;
  b.rows = last_row - first_row;
  if (options_.packing) {
    b.length = options_.max_seq_len;
  } else {
    for (std::int64_t r = first_row; r < last_row; ++r)
      b.length = std::max<std::int64_t>(b.length, static_cast<std::int64_t>(example(row_begin_[r]).ids.size()));
  }
  const auto cells = static_cast<std::size_t>(b.rows * b.length);
  b.input_ids.assign(cells, options_.pad_id);
  b.labels.assign(cells, kIgnoreIndex);
  b.position_ids.assign(cells, 0);
  b.segment_ids.assign(cells, 0);
  for (std::int64_t r = first_row; r < last_row; ++r) {
    auto at = static_cast<std::size_t>((r - first_row) * b.length);
    std::int32_t segment = 0;
    for (std::int64_t k = row_begin_[r]; k < row_begin_[r + 1]; ++k) {
      const Example& ex = example(k);
      ++segment;
      for (std::size_t t = 0; t < ex.ids.size(); ++t, ++at) {
        b.input_ids[at] = ex.ids[t];
        b.labels[at] = ex.labels[t];
        b.position_ids[at] = static_cast<std::int64_t>(t);
        b.segment_ids[at] = segment;
      }
    }
  }
  return b;
}

BatchPlan sequential_plan(const std::vector<Example>& examples, const BatchOptions& options) {
  std::vector<std::int64_t> order(examples.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  return BatchPlan(examples, order, options);
}

}  // namespace ctune::data
