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
  out.rows_per_group = rows_per_group;
  if (!examples.empty()) out.examples.assign(examples.begin() + begin, examples.begin() + end);
  if (!desirable.empty()) out.desirable.assign(desirable.begin() + begin, desirable.begin() + end);
  return out;
}

BatchPlan::BatchPlan(const std::vector<Example>& examples, const std::vector<std::int64_t>& order,
                     const BatchOptions& options)
    : examples_(&examples), options_(options) {
  if (options.batch_size < 1) throw ConfigError("batch_size: expected at least 1, found " + std::to_string(options.batch_size));
  if (options.packing_window < 0)
    throw ConfigError("data.packing_window: expected 0 or more documents, found " + std::to_string(options.packing_window));
  if (options.rows_per_group < 1) throw ConfigError("rows per group: expected at least 1, found " + std::to_string(options.rows_per_group));
  if (options.rows_per_group > 1 && options.packing)
    throw ConfigError("data.packing: a preference pair's rows are scored as whole sequences; set data.packing: false");
  if (static_cast<std::int64_t>(order.size()) % options.rows_per_group != 0)
    throw ShapeError("batch plan: " + std::to_string(order.size()) + " examples do not make whole groups of " +
                     std::to_string(options.rows_per_group));
  pieces_.reserve(order.size());
  row_begin_.reserve(order.size() + 1);
  if (!options.packing) {
    for (std::int64_t k : order) {
      pieces_.push_back({k, 0, length_of(k)});
      row_begin_.push_back(static_cast<std::int64_t>(pieces_.size()));
    }
    return;
  }
  if (options.packing_split) {
    pack_split(order);
  } else {
    for (std::int64_t k : order) {
      if (length_of(k) > options.max_seq_len)
        throw ShapeError("packing: example " + std::to_string(k) + " has " + std::to_string(length_of(k)) +
                         " tokens, more than max_seq_len " + std::to_string(options.max_seq_len));
    }
    if (options.packing_window > 0) {
      pack_windows(order);
    } else {
      pack_in_order(order);
    }
  }
}

std::int64_t BatchPlan::length_of(std::int64_t example) const {
  return static_cast<std::int64_t>((*examples_)[static_cast<std::size_t>(example)].ids.size());
}

void BatchPlan::pack_in_order(const std::vector<std::int64_t>& order) {
  std::int64_t used = 0;
  for (std::int64_t k : order) {
    const auto len = length_of(k);
    if (used > 0 && used + len > options_.max_seq_len) {
      row_begin_.push_back(static_cast<std::int64_t>(pieces_.size()));
      used = 0;
    }
    pieces_.push_back({k, 0, len});
    used += len;
  }
  if (!pieces_.empty()) row_begin_.push_back(static_cast<std::int64_t>(pieces_.size()));
}

void BatchPlan::pack_windows(const std::vector<std::int64_t>& order) {
  const auto cap = options_.max_seq_len;
  const auto window = static_cast<std::size_t>(options_.packing_window);
  for (std::size_t first = 0; first < order.size(); first += window) {
    const std::size_t last = std::min(order.size(), first + window);
    // Positions in the window, longest document first; stable, so ties keep the given order.
    std::vector<std::size_t> by_length(last - first);
    std::iota(by_length.begin(), by_length.end(), first);
    std::stable_sort(by_length.begin(), by_length.end(),
                     [&](std::size_t a, std::size_t b) { return length_of(order[a]) > length_of(order[b]); });
    // First fit: rows[r] lists its documents, room[r] what is left. Rows too full for the
    // window's shortest document are closed, so the scan only visits rows that could take one.
    const auto shortest = by_length.empty() ? cap : length_of(order[by_length.back()]);
    std::vector<std::vector<std::int64_t>> rows;
    std::vector<std::int64_t> room;
    std::vector<std::size_t> open;
    for (std::size_t at : by_length) {
      const auto len = length_of(order[at]);
      auto fits = std::find_if(open.begin(), open.end(), [&](std::size_t r) { return room[r] >= len; });
      std::size_t r;
      if (fits == open.end()) {
        r = rows.size();
        rows.emplace_back();
        room.push_back(cap);
        open.push_back(r);
        fits = open.end() - 1;
      } else {
        r = *fits;
      }
      rows[r].push_back(order[at]);
      room[r] -= len;
      if (room[r] < shortest) open.erase(fits);
    }
    for (const auto& row : rows) {
      for (std::int64_t k : row) pieces_.push_back({k, 0, length_of(k)});
      row_begin_.push_back(static_cast<std::int64_t>(pieces_.size()));
    }
  }
}

void BatchPlan::pack_split(const std::vector<std::int64_t>& order) {
  std::int64_t used = 0;
  for (std::int64_t k : order) {
    const auto len = length_of(k);
    for (std::int64_t begin = 0; begin < len;) {
      const auto end = std::min(len, begin + options_.max_seq_len - used);
      pieces_.push_back({k, begin, end});
      used += end - begin;
      begin = end;
      if (used == options_.max_seq_len) {
        row_begin_.push_back(static_cast<std::int64_t>(pieces_.size()));
        used = 0;
      }
    }
  }
  if (used > 0) row_begin_.push_back(static_cast<std::int64_t>(pieces_.size()));
}

std::int64_t BatchPlan::size() const {
  return (num_rows() + rows_per_batch() - 1) / rows_per_batch();
}

std::int64_t BatchPlan::num_tokens() const {
  std::int64_t n = 0;
  for (const Piece& p : pieces_) n += p.end - p.begin;
  return n;
}

Batch BatchPlan::batch(std::int64_t index) const {
  if (index < 0 || index >= size())
    throw ShapeError("batch index " + std::to_string(index) + " out of range (plan has " + std::to_string(size()) +
                     " batches)");
  const std::int64_t first_row = index * rows_per_batch();
  const std::int64_t last_row = std::min(first_row + rows_per_batch(), num_rows());
  auto piece = [&](std::int64_t k) -> const Piece& { return pieces_[static_cast<std::size_t>(k)]; };
  Batch b;
  b.rows = last_row - first_row;
  b.rows_per_group = options_.rows_per_group;
  for (std::int64_t r = first_row; r < last_row; ++r) {
    b.examples.push_back(options_.packing ? -1 : piece(row_begin_[static_cast<std::size_t>(r)]).example);
    b.desirable.push_back(options_.packing ? std::int8_t{-1} : (*examples_)[static_cast<std::size_t>(b.examples.back())].desirable);
  }
  if (options_.packing) {
    b.length = options_.max_seq_len;
  } else {
    for (std::int64_t r = first_row; r < last_row; ++r) {
      const Piece& p = piece(row_begin_[static_cast<std::size_t>(r)]);
      b.length = std::max<std::int64_t>(b.length, p.end - p.begin);
    }
  }
  const auto cells = static_cast<std::size_t>(b.rows * b.length);
  b.input_ids.assign(cells, options_.pad_id);
  b.labels.assign(cells, kIgnoreIndex);
  b.position_ids.assign(cells, 0);
  b.segment_ids.assign(cells, 0);
  for (std::int64_t r = first_row; r < last_row; ++r) {
    auto at = static_cast<std::size_t>((r - first_row) * b.length);
    std::int32_t segment = 0;
    for (std::int64_t k = row_begin_[static_cast<std::size_t>(r)]; k < row_begin_[static_cast<std::size_t>(r + 1)]; ++k) {
      const Piece& p = piece(k);
      const Example& ex = (*examples_)[static_cast<std::size_t>(p.example)];
      ++segment;
      for (std::int64_t t = p.begin; t < p.end; ++t, ++at) {
        b.input_ids[at] = ex.ids[static_cast<std::size_t>(t)];
        // A continued document's first token here has nothing before it in the row.
        b.labels[at] = t == p.begin ? kIgnoreIndex : ex.labels[static_cast<std::size_t>(t)];
        b.position_ids[at] = t - p.begin;
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
