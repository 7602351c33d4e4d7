// Batches without tensors: flat row-major vectors the trainer turns into tensors, and the
// BatchPlan that decides which examples go into which row of which batch.
//
// Unpacked: one example per row, rows right-padded to the longest row of the batch.
// Packed: examples concatenated into rows of exactly max_seq_len; positions restart at 0 for
// each document, and segment ids number the documents of a row 1, 2, ... (0 = padding) so
// attention stays within a document. Which documents share a row:
//   packing_window 0: in the given order, the next row starting when a document does not fit;
//   packing_window W: bin-packing over consecutive windows of W documents of the given order
//     (first-fit decreasing: longest first, each into the first row with room; rows in the
//     order they were opened; ties keep the given order), so short documents fill the gaps
//     that long ones leave. Deterministic in the order, hence resumable;
//   packing_split: in the given order, every row filled to its last token: a document that does
//     not fit continues at the start of the next row as a document of its own (positions
//     restart, its first token there is not a target). The window is then moot.
// The last batch of a plan may have fewer rows; it is kept.
// Groups (BatchOptions::rows_per_group > 1, preference pairs): one example per row, batch_size
// groups per batch, a group never split between batches.
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
  // Consecutive rows that form one group (BatchOptions::rows_per_group); rows is a multiple.
  std::int64_t rows_per_group = 1;
  // Per row, the index of its example in the plan's examples; -1 for a packed row.
  std::vector<std::int64_t> examples;
  // Per row, its example's Example::desirable (unpaired records; -1 elsewhere and when packed).
  std::vector<std::int8_t> desirable;
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
  std::int64_t packing_window = 0;  // documents per bin-packing window (0: pack in order)
  bool packing_split = false;       // documents may continue in the next row
  // Examples that belong together, consecutive in the order: 2 for preference pairs (chosen,
  // rejected). A batch holds batch_size groups, one example per row, never packed.
  std::int64_t rows_per_group = 1;
};

class BatchPlan {
 public:
  BatchPlan() = default;
  // `order`: indices into `examples`, in the order they are batched. `examples` must outlive
  // the plan. ShapeError when packing and an example is longer than max_seq_len.
  BatchPlan(const std::vector<Example>& examples, const std::vector<std::int64_t>& order, const BatchOptions& options);

  std::int64_t size() const;  // number of batches
  std::int64_t num_rows() const { return static_cast<std::int64_t>(row_begin_.size()) - 1; }
  std::int64_t num_tokens() const;  // document tokens over all rows (padding not counted)
  Batch batch(std::int64_t index) const;

 private:
  // Tokens [begin, end) of one example: a whole document, or a part of one under packing_split.
  struct Piece {
    std::int64_t example = 0;
    std::int64_t begin = 0, end = 0;
  };
  void pack_in_order(const std::vector<std::int64_t>& order);
  void pack_windows(const std::vector<std::int64_t>& order);
  void pack_split(const std::vector<std::int64_t>& order);
  std::int64_t length_of(std::int64_t example) const;
  std::int64_t rows_per_batch() const { return options_.batch_size * options_.rows_per_group; }

  const std::vector<Example>* examples_ = nullptr;
  BatchOptions options_;
  std::vector<Piece> pieces_;
  // Row r holds pieces_[row_begin_[r] .. row_begin_[r + 1]).
  std::vector<std::int64_t> row_begin_{0};
};

// Eval batches: every example once, in file order, never shuffled.
BatchPlan sequential_plan(const std::vector<Example>& examples, const BatchOptions& options);

}  // namespace ctune::data
