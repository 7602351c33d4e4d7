// KTO's KL rows; see kl_rows.h.
#include "data/kl_rows.h"

#include <algorithm>

namespace ctune::data {
namespace {

// The index of the first trained token (the prompt's length); the example's length when none.
std::size_t first_target(const Example& e) {
  const auto it = std::find_if(e.labels.begin(), e.labels.end(), [](std::int32_t l) { return l != kIgnoreIndex; });
  return static_cast<std::size_t>(it - e.labels.begin());
}

// `prompt_of`'s prompt followed by `completion_of`'s completion.
Example kl_row(const Example& prompt_of, const Example& completion_of, std::int64_t max_seq_len, Truncation truncation) {
  const std::size_t p = first_target(prompt_of), c = first_target(completion_of);
  Example kl;
  kl.record = prompt_of.record;
  kl.ids.assign(prompt_of.ids.begin(), prompt_of.ids.begin() + static_cast<std::ptrdiff_t>(p));
  kl.labels.assign(p, kIgnoreIndex);
  kl.ids.insert(kl.ids.end(), completion_of.ids.begin() + static_cast<std::ptrdiff_t>(c), completion_of.ids.end());
  kl.labels.insert(kl.labels.end(), completion_of.labels.begin() + static_cast<std::ptrdiff_t>(c), completion_of.labels.end());
  const auto max = static_cast<std::size_t>(max_seq_len);
  if (kl.ids.size() > max) {
    const auto cut = static_cast<std::ptrdiff_t>(kl.ids.size() - max);
    if (truncation == Truncation::keep_end) {
      kl.ids.erase(kl.ids.begin(), kl.ids.begin() + cut);
      kl.labels.erase(kl.labels.begin(), kl.labels.begin() + cut);
      kl.labels.front() = kIgnoreIndex;  // nothing precedes the first token
    } else {
      kl.ids.resize(max);
      kl.labels.resize(max);
    }
  }
  return kl;
}

}  // namespace

std::vector<Example> with_kl_rows(std::vector<Example> matched, std::int64_t block, std::int64_t max_seq_len, Truncation truncation) {
  const auto n = static_cast<std::int64_t>(matched.size());
  const std::int64_t b = std::max<std::int64_t>(block, 1);
  std::vector<Example> kl;  // all of them before any record moves: a record's completion serves another's row
  kl.reserve(matched.size());
  for (std::int64_t start = 0; start < n; start += b) {
    const std::int64_t end = std::min(start + b, n);
    for (std::int64_t k = start; k < end; ++k) {
      const std::int64_t other = k == start ? end - 1 : k - 1;
      kl.push_back(kl_row(matched[static_cast<std::size_t>(k)], matched[static_cast<std::size_t>(other)], max_seq_len, truncation));
    }
  }
  std::vector<Example> out;
  out.reserve(matched.size() * 2);
  for (std::size_t k = 0; k < matched.size(); ++k) {
    out.push_back(std::move(matched[k]));
    out.push_back(std::move(kl[k]));
  }
  return out;
}

}  // namespace ctune::data
