// Batching: packed (in order or bin-packed) and unpacked batches of the same documents carry the
// same (input, label, position) triples per document and the same number of loss targets;
// packed rows are exactly max_seq_len long, documents are never split (unless packing_split,
// whose rows are full and lose one target per cut), positions restart and segment ids count the
// documents of a row; unpacked rows are padded to the longest row; the last partial batch is kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "core/error.h"
#include "data/batch.h"

namespace ctune::data {
namespace {

using Triple = std::array<std::int64_t, 3>;  // input id, label, position
using Doc = std::vector<Triple>;

// Documents of varied lengths with some masked labels; the first label is always masked.
std::vector<Example> make_examples(std::size_t n, std::int64_t max_len) {
  std::vector<Example> out;
  std::uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (std::size_t k = 0; k < n; ++k) {
    Example e;
    const auto len = static_cast<std::size_t>(2 + next() % static_cast<std::uint64_t>(max_len - 1));
    for (std::size_t t = 0; t < len; ++t) {
      const auto id = static_cast<std::int32_t>(1 + next() % 500);
      e.ids.push_back(id);
      e.labels.push_back(t == 0 || next() % 3 == 0 ? kIgnoreIndex : id);
    }
    e.record = static_cast<std::int64_t>(k);
    out.push_back(std::move(e));
  }
  return out;
}

// The documents of every batch of `plan`: maximal runs of one non-zero segment id in a row.
std::vector<Doc> documents(const BatchPlan& plan, std::int64_t& targets) {
  std::vector<Doc> docs;
  targets = 0;
  for (std::int64_t b = 0; b < plan.size(); ++b) {
    const Batch batch = plan.batch(b);
    targets += batch.target_tokens();
    for (std::int64_t r = 0; r < batch.rows; ++r) {
      std::int32_t current = 0;
      for (std::int64_t t = 0; t < batch.length; ++t) {
        const auto at = static_cast<std::size_t>(r * batch.length + t);
        const std::int32_t seg = batch.segment_ids[at];
        if (seg == 0) continue;
        if (seg != current) docs.emplace_back();
        current = seg;
        docs.back().push_back({batch.input_ids[at], batch.labels[at], batch.position_ids[at]});
      }
    }
  }
  std::sort(docs.begin(), docs.end());
  return docs;
}

TEST(Batching, PackedAndUnpackedCarryTheSameDocuments) {
  const std::int64_t max_len = 64;
  const auto examples = make_examples(37, max_len);
  std::vector<std::int64_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());

  std::vector<Doc> want;
  std::int64_t want_targets = 0;
  for (const Example& e : examples) {
    Doc d;
    for (std::size_t t = 0; t < e.ids.size(); ++t) {
      d.push_back({e.ids[t], e.labels[t], static_cast<std::int64_t>(t)});
      if (e.labels[t] != kIgnoreIndex) ++want_targets;
    }
    want.push_back(d);
  }
  std::sort(want.begin(), want.end());

  BatchOptions opt;
  opt.batch_size = 4;
  opt.max_seq_len = max_len;
  opt.pad_id = 7;
  std::int64_t unpacked_targets = 0, packed_targets = 0;
  const BatchPlan unpacked(examples, order, opt);
  opt.packing = true;
  const BatchPlan packed(examples, order, opt);
  EXPECT_EQ(documents(unpacked, unpacked_targets), want);
  EXPECT_EQ(documents(packed, packed_targets), want);
  EXPECT_EQ(unpacked_targets, want_targets);
  EXPECT_EQ(packed_targets, want_targets);
  EXPECT_LT(packed.num_rows(), unpacked.num_rows());
  for (std::int64_t window : {1, 4, 16, 1000}) {
    opt.packing_window = window;
    const BatchPlan binned(examples, order, opt);
    std::int64_t binned_targets = 0;
    EXPECT_EQ(documents(binned, binned_targets), want) << "window " << window;
    EXPECT_EQ(binned_targets, want_targets) << "window " << window;
    EXPECT_EQ(binned.num_tokens(), packed.num_tokens());
    if (window >= 16) EXPECT_LT(binned.num_rows(), packed.num_rows()) << "window " << window;
  }
}

TEST(Batching, BinPackingByHand) {
  std::vector<Example> ex;
  for (std::size_t len : {5, 3, 6, 2, 4, 7, 1}) {
    Example e;
    e.ids.assign(len, static_cast<std::int32_t>(len));  // the id tells the document
    e.labels.assign(len, 1);
    e.labels[0] = kIgnoreIndex;
    ex.push_back(e);
  }
  // The documents of each row, as their lengths, in row order.
  auto rows = [&](std::int64_t window) {
    BatchOptions opt{1, 8, true, 0};
    opt.packing_window = window;
    const BatchPlan plan(ex, {0, 1, 2, 3, 4, 5, 6}, opt);
    std::vector<std::vector<std::int64_t>> out;
    for (std::int64_t b = 0; b < plan.size(); ++b) {
      const Batch batch = plan.batch(b);
      out.emplace_back();
      for (std::int64_t t = 0; t < batch.length; ++t)
        if (batch.position_ids[static_cast<std::size_t>(t)] == 0 && batch.segment_ids[static_cast<std::size_t>(t)] != 0)
          out.back().push_back(batch.input_ids[static_cast<std::size_t>(t)]);
    }
    return out;
  };
  using Rows = std::vector<std::vector<std::int64_t>>;
  // One window of 7, longest first into the first row with room: 7 6 5 4 open rows, 3 joins 5,
  // 2 joins 6, 1 joins 7. Full rows: 4 instead of 5 in order ([5 3] [6 2] [4] [7 1]).
  EXPECT_EQ(rows(7), (Rows{{7, 1}, {6, 2}, {5, 3}, {4}}));
  EXPECT_EQ(rows(0), (Rows{{5, 3}, {6, 2}, {4}, {7, 1}}));
  // Windows of 3: {5 3 6} -> [6] [5 3]; {2 4 7} -> [7] [4 2]; {1} -> [1].
  EXPECT_EQ(rows(3), (Rows{{6}, {5, 3}, {7}, {4, 2}, {1}}));
}

TEST(Batching, SplitRowsAreFullAndLoseOneTargetPerCut) {
  const std::int64_t max_len = 40;
  const auto examples = make_examples(53, 30);
  std::vector<std::int64_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());
  BatchOptions opt{3, max_len, true, 0};
  opt.packing_split = true;
  opt.packing_window = 8;  // moot under packing_split
  const BatchPlan plan(examples, order, opt);
  // The token stream of the order, and the targets it has.
  std::vector<std::int64_t> stream_ids, stream_labels;
  for (std::int64_t k : order) {
    const Example& e = examples[static_cast<std::size_t>(k)];
    stream_ids.insert(stream_ids.end(), e.ids.begin(), e.ids.end());
    stream_labels.insert(stream_labels.end(), e.labels.begin(), e.labels.end());
  }
  const auto total = static_cast<std::int64_t>(stream_ids.size());
  EXPECT_EQ(plan.num_tokens(), total);
  EXPECT_EQ(plan.num_rows(), (total + max_len - 1) / max_len);
  std::int64_t at = 0, targets = 0, cut_targets = 0;
  for (std::int64_t b = 0; b < plan.size(); ++b) {
    const Batch batch = plan.batch(b);
    targets += batch.target_tokens();
    for (std::int64_t r = 0; r < batch.rows; ++r) {
      for (std::int64_t t = 0; t < batch.length; ++t, ++at) {
        const auto cell = static_cast<std::size_t>(r * batch.length + t);
        if (at >= total) {  // only the last row has padding
          EXPECT_EQ(batch.segment_ids[cell], 0);
          continue;
        }
        const auto k = static_cast<std::size_t>(at);
        ASSERT_EQ(batch.input_ids[cell], stream_ids[k]) << "row tokens are the order's stream";
        if (t == 0 && stream_labels[k] != kIgnoreIndex) {  // a document continued from the row before
          EXPECT_EQ(batch.labels[cell], kIgnoreIndex);
          EXPECT_EQ(batch.position_ids[cell], 0);
          ++cut_targets;
        } else {
          EXPECT_EQ(batch.labels[cell], stream_labels[k]);
        }
      }
    }
  }
  std::int64_t want_targets = 0;
  for (std::int64_t l : stream_labels) want_targets += l != kIgnoreIndex;
  EXPECT_EQ(targets, want_targets - cut_targets);
  EXPECT_GT(cut_targets, 0);
}

TEST(Batching, PackedRowsLayout) {
  const auto examples = make_examples(50, 30);
  std::vector<std::int64_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  BatchOptions opt{3, 40, true, 0};
  const BatchPlan plan(examples, order, opt);
  std::size_t next_example = 0;
  for (std::int64_t b = 0; b < plan.size(); ++b) {
    const Batch batch = plan.batch(b);
    EXPECT_EQ(batch.length, 40);
    ASSERT_EQ(batch.input_ids.size(), static_cast<std::size_t>(batch.rows * batch.length));
    for (std::int64_t r = 0; r < batch.rows; ++r) {
      std::int32_t seg = 0;
      std::int64_t pos = 0;
      for (std::int64_t t = 0; t < batch.length; ++t) {
        const auto at = static_cast<std::size_t>(r * batch.length + t);
        const std::int32_t s = batch.segment_ids[at];
        if (s == 0) {  // padding: only at the end of the row
          for (std::int64_t u = t; u < batch.length; ++u)
            EXPECT_EQ(batch.segment_ids[static_cast<std::size_t>(r * batch.length + u)], 0);
          EXPECT_EQ(batch.labels[at], kIgnoreIndex);
          EXPECT_EQ(batch.input_ids[at], 0);
          break;
        }
        if (s != seg) {  // a new document: next segment id, position 0, the next example in order
          EXPECT_EQ(s, seg + 1);
          seg = s;
          pos = 0;
          ASSERT_LT(next_example, examples.size());
          const Example& e = examples[next_example++];
          for (std::size_t k = 0; k < e.ids.size(); ++k)
            ASSERT_EQ(batch.input_ids[at + k], e.ids[k]) << "document split or reordered";
        }
        EXPECT_EQ(batch.position_ids[at], pos++);
      }
      // Greedy: the next document would not have fitted in this row.
      if (next_example < examples.size()) {
        std::int64_t used = 0;
        for (std::int64_t t = 0; t < batch.length; ++t)
          used += batch.segment_ids[static_cast<std::size_t>(r * batch.length + t)] != 0;
        EXPECT_GT(used + static_cast<std::int64_t>(examples[next_example].ids.size()), 40);
      }
    }
  }
  EXPECT_EQ(next_example, examples.size());
}

TEST(Batching, GreedyPackingByHand) {
  std::vector<Example> ex;
  for (std::size_t len : {3, 4, 2, 5, 8}) {
    Example e;
    e.ids.assign(len, 1);
    e.labels.assign(len, 1);
    e.labels[0] = kIgnoreIndex;
    ex.push_back(e);
  }
  const BatchPlan plan(ex, {0, 1, 2, 3, 4}, BatchOptions{2, 8, true, 0});
  EXPECT_EQ(plan.num_rows(), 3);  // [3 4] [2 5] [8]
  EXPECT_EQ(plan.size(), 2);
  const Batch last = plan.batch(1);  // the partial last batch is kept
  EXPECT_EQ(last.rows, 1);
  EXPECT_EQ(last.target_tokens(), 7);
  const Batch first = plan.batch(0);
  EXPECT_EQ(first.segment_ids[3], 2);  // row 0: the second document starts at 3
  EXPECT_EQ(first.position_ids[3], 0);
  EXPECT_EQ(first.segment_ids[7], 0);  // and the row ends with one padding cell
  EXPECT_THROW(BatchPlan(ex, {4}, BatchOptions{1, 7, true, 0}), ShapeError);
  EXPECT_THROW(plan.batch(2), ShapeError);
}

TEST(Batching, UnpackedRowsArePaddedToTheLongestRow) {
  std::vector<Example> ex;
  for (std::size_t len : {3, 6, 2, 5, 4}) {
    Example e;
    for (std::size_t t = 0; t < len; ++t) {
      e.ids.push_back(static_cast<std::int32_t>(10 + t));
      e.labels.push_back(t == 0 ? kIgnoreIndex : static_cast<std::int32_t>(10 + t));
    }
    ex.push_back(e);
  }
  const BatchPlan plan(ex, {0, 1, 2, 3, 4}, BatchOptions{2, 1024, false, 99});
  ASSERT_EQ(plan.size(), 3);
  const Batch b0 = plan.batch(0);
  EXPECT_EQ(b0.rows, 2);
  EXPECT_EQ(b0.length, 6);
  EXPECT_EQ(b0.input_ids[3], 99);  // row 0 padded after 3 tokens
  EXPECT_EQ(b0.labels[3], kIgnoreIndex);
  EXPECT_EQ(b0.segment_ids[3], 0);
  EXPECT_EQ(b0.segment_ids[2], 1);
  EXPECT_EQ(b0.position_ids[6 + 5], 5);
  EXPECT_EQ(b0.target_tokens(), 2 + 5);
  const Batch b2 = plan.batch(2);
  EXPECT_EQ(b2.rows, 1);
  EXPECT_EQ(b2.length, 4);
  const BatchPlan eval = sequential_plan(ex, BatchOptions{10, 1024, false, 0});
  EXPECT_EQ(eval.size(), 1);
  EXPECT_EQ(eval.batch(0).input_ids[6], 10);  // row 1 is example 1, in file order
}

}  // namespace
}  // namespace ctune::data
