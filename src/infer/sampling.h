// Next-token selection as Hugging Face generate does it (docs/formats.md#sampling-hugging-face-generate): penalties
// first (repetition, no-repeat n-gram), then, when sampling, temperature, top-k and top-p;
// greedy decoding takes the argmax of the penalised scores.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace ctune::infer {

struct SamplingOptions {
  bool do_sample = false;
  double temperature = 1.0;        // > 0
  std::int64_t top_k = 50;         // 0: off
  double top_p = 1.0;              // in (0, 1]
  double repetition_penalty = 1.0;  // > 0; 1: off
  std::int64_t no_repeat_ngram_size = 0;
};

// FormatError when a forward's `logits` hold NaN or +inf (-inf is a banned token): a weight of the
// model or its adapter is not finite, or the compute dtype overflowed. Without it a greedy
// decode repeats token 0, and sampling ends in torch's unlocated multinomial error.
void check_logits(const at::Tensor& logits);

// Applies the processors to `logits` [V] for a sequence `history` (prompt + generated) and
// returns the processed scores (float32; float64 when `logits` is); filtered entries are -inf.
at::Tensor process_logits(at::Tensor logits, const std::vector<std::int64_t>& history, const SamplingOptions& options);

// Chooses the next token from processed scores: argmax, or a draw from softmax(scores).
std::int64_t choose_token(const at::Tensor& scores, const SamplingOptions& options, at::Generator& gen);

// The seed of sampling stream `stream` under `seed` (splitmix64 of the pair): each sequence
// draws from its own stream, so what it samples does not depend on the other sequences of its
// batch, on the batch size, or on which process generates it.
std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t stream);

}  // namespace ctune::infer
