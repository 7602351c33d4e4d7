#include "infer/exact_match.h"

#include <algorithm>

#include "core/progress.h"
#include "infer/generate.h"

namespace ctune::infer {

std::vector<MatchCase> match_cases(const std::vector<data::Example>& examples, std::int64_t limit) {
  std::vector<MatchCase> cases;
  for (const auto& ex : examples) {
    if (limit >= 0 && static_cast<std::int64_t>(cases.size()) >= limit) break;
    std::size_t first = 0;
    while (first < ex.labels.size() && ex.labels[first] == data::kIgnoreIndex) ++first;
    if (first == 0 || first >= ex.ids.size()) continue;
    std::size_t end = first;
    while (end < ex.labels.size() && ex.labels[end] != data::kIgnoreIndex) ++end;
    MatchCase c;
    c.prompt.assign(ex.ids.begin(), ex.ids.begin() + static_cast<std::ptrdiff_t>(first));
    c.expected.assign(ex.ids.begin() + static_cast<std::ptrdiff_t>(first), ex.ids.begin() + static_cast<std::ptrdiff_t>(end));
    c.end = c.expected.back();
    c.expected.pop_back();
    cases.push_back(std::move(c));
  }
  return cases;
}

Accuracy exact_match(model::CausalLM& lm, const std::vector<data::Example>& examples, std::optional<std::int64_t> eos, std::int64_t limit,
                     const std::function<void(const MatchCase&, const std::vector<std::int64_t>&, bool)>& seen) {
  const auto cases = match_cases(examples, limit);
  const std::size_t kBatch = 16;
  Accuracy a;
  Stage stage("exact match", static_cast<std::int64_t>(cases.size()), "examples");
  for (std::size_t first = 0; first < cases.size(); first += kBatch) {
    const auto last = std::min(cases.size(), first + kBatch);
    GenerateOptions g;
    std::vector<std::vector<std::int64_t>> prompts;
    std::int64_t longest_answer = 0, room = lm->config().max_position_embeddings;
    for (auto i = first; i < last; ++i) {
      prompts.push_back(cases[i].prompt);
      g.stop_ids.push_back(cases[i].end);
      longest_answer = std::max(longest_answer, static_cast<std::int64_t>(cases[i].expected.size()));
      room = std::min(room, lm->config().max_position_embeddings - static_cast<std::int64_t>(cases[i].prompt.size()));
    }
    if (eos) g.stop_ids.push_back(*eos);
    g.max_new_tokens = std::max<std::int64_t>(1, std::min(longest_answer + 4, room));
    const auto got = generate(lm, prompts, g);
    for (auto i = first; i < last; ++i) {
      const auto& out = got[i - first];
      const bool ok = out.stop_reason == "eos" && out.ids == cases[i].expected;
      a.correct += ok;
      ++a.total;
      if (seen) seen(cases[i], out.ids, ok);
    }
    stage.update(a.total, 0, [&] { return std::to_string(a.correct) + " correct"; });
  }
  stage.finish();
  return a;
}

}  // namespace ctune::infer
