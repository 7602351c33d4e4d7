// What generation takes and gives (infer/generate.h: greedy, sampled; infer/beam_search.h):
// options, results, timings and the per-token callback, apart from both algorithms so that
// neither includes the other.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "infer/sampling.h"

namespace ctune::infer {

// When beam search stops, as Hugging Face's `early_stopping` (docs/formats.md "Beam search"):
// `heuristic` (False) when no running beam can still beat the worst of num_beams finished
// hypotheses at the current length; `first` (True) as soon as num_beams hypotheses are finished;
// `never` only when no running beam can beat them at any length up to max_new_tokens.
enum class EarlyStopping { heuristic, first, never };

struct GenerateOptions {
  std::int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::vector<std::int64_t> stop_ids;  // usually the eos ids; the stop token is not returned
  std::uint64_t seed = 0;
  // Per prompt, the number of its sampling stream (infer/sampling.h stream_seed); empty: the
  // prompt's index. A caller that splits one set of prompts over calls or processes passes each
  // prompt's index in the whole set, so the split changes nothing.
  std::vector<std::uint64_t> streams;
  // Beam search when > 1 (greedy only: sampling is refused); 1: greedy or sampled decoding.
  std::int64_t num_beams = 1;
  double length_penalty = 1.0;  // a finished hypothesis scores sum log p / generated_len^length_penalty
  EarlyStopping early_stopping = EarlyStopping::heuristic;
};

struct Generation {
  std::vector<std::int64_t> ids;  // generated ids, the stop token excluded
  std::string stop_reason;        // "eos" (a stop id), "length" (max_new_tokens), "stop" (the callback)
  double score = 0;               // beam search: the hypothesis' length-penalised score; else 0
  std::int64_t stop_id = -1;      // stop_reason "eos": the stop id drawn (not in ids)
};

// Wall time of the two phases and their token counts: the prefill (the prompts' forward pass,
// which yields each sequence's first token) over the prompt tokens (padding excluded), and the
// decode (every step after it) over the tokens it generated, all sequences together.
struct GenerateStats {
  double prefill_s = 0, decode_s = 0;
  std::int64_t prefill_tokens = 0, decode_tokens = 0;
};

// Called with (sequence index, generated ids so far) after each token a sequence keeps; returns
// false to stop that sequence there (stop reason "stop").
using TokenCallback = std::function<bool(std::size_t, const std::vector<std::int64_t>&)>;

}  // namespace ctune::infer
