// KTO's KL rows (data.format unpaired_preference, docs/objectives.md#kto): KTO estimates its
// reference point, the policy's KL divergence from the reference, on mismatched pairs: a
// record's prompt with another record's completion. As TRL builds them (KTOTrainer's
// _prepare_dataset), the completions are rotated by one within consecutive blocks of
// `block` records in the split's order, the training batch size: record k of a block is paired
// with the completion of record k - 1, the block's first with its last. Under sequential
// sampling a batch is such a block, so the batch's mismatched completions are its own
// completions paired with other prompts (the paper's estimator); the pairing is fixed per
// record, so the reference's log-probabilities of the KL rows can be precomputed.
#pragma once

#include <cstdint>
#include <vector>

#include "data/example.h"
#include "data/options.h"

namespace ctune::data {

// `matched`: one example per record, in the split's order (prompt untrained, completion trained).
// Returns 2 examples per record, the record's own then its KL row: its prompt (the tokens before
// its first trained one) followed by the rotated completion, cut to `max_seq_len` at its end, or
// at its start under data.truncation keep_end.
std::vector<Example> with_kl_rows(std::vector<Example> matched, std::int64_t block, std::int64_t max_seq_len, Truncation truncation);

}  // namespace ctune::data
