// Exact-match accuracy of greedy generation (`ctune eval --accuracy`): each example's first
// trained span generated from the tokens before it, 16 examples per left-padded batch. A
// generation stops at an end-of-turn token of its batch (or eos) or a few tokens past the
// longest expected answer; either way only the exact answer followed by a stop counts, so
// batching does not change what matches.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "data/example.h"
#include "model/decoder.h"

namespace ctune::infer {

// One case: the tokens before an example's first trained span, the span without its closing
// end-of-turn token, and that token.
struct MatchCase {
  std::vector<std::int64_t> prompt, expected;
  std::int64_t end = 0;
};

// The cases of the first `limit` usable examples (all when limit < 0); an example with no
// trained span, or one that starts at the first token, has none.
std::vector<MatchCase> match_cases(const std::vector<data::Example>& examples, std::int64_t limit);

struct Accuracy {
  std::int64_t correct = 0, total = 0;
};

// `seen(case, generated ids, matched)` is called for each case in order (to show some).
Accuracy exact_match(model::CausalLM& lm, const std::vector<data::Example>& examples, std::optional<std::int64_t> eos, std::int64_t limit,
                     const std::function<void(const MatchCase&, const std::vector<std::int64_t>&, bool)>& seen = nullptr);

}  // namespace ctune::infer
