// Prompt sharing for online RL (docs/objectives.md#prompt-sharing). A GRPO group is one prompt
// and num_generations completions of it; trained as separate rows, the prompt's forward and
// backward run once per completion. Shared, a group is one row: the prompt's tokens but its last
// once, then each completion as its own segment that starts with a copy of the prompt's last
// token (whose hidden state predicts the completion's first token) and sees the prompt before it
// (ForwardInputs::prefix_ids) but no other completion; positions continue the prompt's in every
// segment. Every target then has the hidden state it has in its own row: the loss, its gradients
// and every logged figure are the separate rows' up to the order of floating-point sums (the
// prompt's gradients arrive summed over the group inside one product rather than one row each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "train/step/loss.h"

namespace ctune::train {

// A batch's shape, rows of `length` tokens (padding included).
struct RowShape {
  std::int64_t rows = 0, length = 0;
};

// The multiply-adds of a forward over `shape` that depend on the layout: every token's linear
// projections and, per query, the keys the blocked attention kernel spans (every key up to its
// block's last query: ops/attention.h), per layer. What `auto` compares.
double layout_cost(const model::ModelConfig& config, RowShape shape);

// The shared layout's shape for groups of `group` rows: per group its prompt length and each
// completion's (group consecutive entries).
RowShape shared_shape(const std::vector<std::int64_t>& prompt_lengths, const std::vector<std::int64_t>& completion_lengths,
                      std::int64_t group);

// Refuses objective.share_prompt "always" where the model cannot share (a Gated DeltaNet): at
// planning time, so validate, estimate and train answer alike.
void check_share_prompt(const std::string& mode, const model::ModelConfig& config);

// objective.share_prompt: always, never, or auto (when the shared layout's cost is lower).
bool share_prompts_here(const std::string& mode, const model::ModelConfig& config, RowShape separate, RowShape shared);

// `rows`, consecutive groups of `group` rows each holding the group's prompt (prompt_lengths[g]
// tokens, no targets, the same in every row of the group) then a completion, right-padded, in
// the shared layout: one row per group, prefix_ids and sequence_ids set (a sequence is its row
// in `rows`), every per-row and per-target field carried over (the targets keep their order).
// The prompts and labels are checked: a violation is a programming error (std::logic_error).
TensorBatch share_prompts(const TensorBatch& rows, const std::vector<std::int64_t>& prompt_lengths, std::int64_t group,
                          std::int64_t pad_id);

}  // namespace ctune::train
