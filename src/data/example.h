// Example: one tokenized document with its labels, the unit the sampler and the batcher move
// around. Labels are not shifted: labels[t] = ids[t] when token t is trained, kIgnoreIndex
// otherwise, and the loss pairs the logits at t with labels[t + 1]. The first token of every
// document is never a target (nothing precedes it), so a document scores the same alone in a
// row or packed after others.
#pragma once

#include <cstdint>
#include <vector>

namespace ctune::data {

// PyTorch's cross_entropy ignore_index default.
inline constexpr std::int32_t kIgnoreIndex = -100;

struct Example {
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> labels;  // same length as ids
  std::int64_t record = 0;           // index of its record among the file's valid records
  // data.format unpaired_preference: 1 for a desirable completion, 0 for an undesirable one; -1
  // for every other example (the KL rows of unpaired records included).
  std::int8_t desirable = -1;
};

}  // namespace ctune::data
