// Text generation with a KV cache: the prompt in one forward pass, then one token at a time
// over the cached keys and values, until an end token or max_new_tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "infer/sampling.h"
#include "model/llama.h"

namespace ctune::infer {

struct GenerateOptions {
  std::int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::vector<std::int64_t> stop_ids;  // usually the eos ids; the stop token is not returned
  std::uint64_t seed = 0;
};

// Returns the generated ids (prompt excluded). The prompt must be non-empty and in vocabulary.
std::vector<std::int64_t> generate(model::CausalLM& model, const std::vector<std::int64_t>& prompt,
                                   const GenerateOptions& options);

}  // namespace ctune::infer
