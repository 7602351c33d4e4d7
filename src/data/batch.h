// Batches without tensors: flat row-major vectors the trainer turns into tensors, and the
// BatchPlan that decides which examples go into which row of which batch.
//
// Unpacked: one example per row, rows right-padded to the longest row of the batch.
// Packed: examples concatenated greedily, in the given order, into rows of exactly
// max_seq_len; a document never spans two rows (the next row starts when it does not fit),
// positions restart at 0 for each document, and segment ids number the documents of a row
// 1, 2, ... (0 = padding) so attention can stay within a document.
// The last batch of a plan may have fewer rows; it is kept.
#pragma once

#include <cstdint>
#include <vector>

#include "data/example.h"

namespace ctune::data {

struct Batch {
  std::int64_t rows = 0, length = 0;
  std::vector<std::int64_t> input_ids;     // [rows * length], padded with the pad id (0 when none)
  std::vector<std::int64_t> labels;        // [rows * length], -100 at padding and masked positions
  std::vector<std::int64_t> position_ids;  // [rows * length], 0.. per document, 0 at padding
  std::vector<std::int32_t> segment_ids;   // [rows * length], k > 0 = k-th document of the row, 0 = padding
  // The loss's token count: pairs (t, t+1) inside a row with labels[t + 1] != -100.
  std::int64_t target_tokens() const;
  // Rows [begin, end) as a batch of their own (a rank's share of a global batch).
  Batch slice_rows(std::int64_t begin, std::int64_t end) const;
};

struct BatchOptions {
  std::int64_t batch_size = 1;
  std::int64_t max_seq_len = 1024;  // packed row length; every example must be at most this long
  bool packing = false;
  std::int64_t pad_id = 0;
};

class BatchPlan {
 public:
  BatchPlan() = default;
  // `order`: indices into `examples`, in the order they are batched. `examples` must outlive
  // the plan. ShapeError when packing and an example is longer than max_seq_len.
  BatchPlan(const std::vector<Example>& examples, const std::vector<std::int64_t>& order, const BatchOptions& options);

  std::int64_t size() const;  // number of batches
  std::int64_t num_rows() const { return static_cast<std::int64_t>(row_begin_.size()) - 1; }
  Batch batch(std::int64_t index) const;

 private:
  const std::vector<Example>* examples_ = nullptr;
  BatchOptions options_;
  std::vector<std::int64_t> order_;
  // Row r holds order_[row_begin_[r] .. row_begin_[r + 1]).
  std::vector<std::int64_t> row_begin_{0};
};

// Eval batches: every example once, in file order, never shuffled.
BatchPlan sequential_plan(const std::vector<Example>& examples, const BatchOptions& options);

}  // namespace ctune::data
