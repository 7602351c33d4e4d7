// Text generation with a KV cache: a batch of prompts, left-padded to one length, in one forward
// pass (each sequence's positions count its own tokens), then one token per sequence per step
// over the cached keys and values, until each sequence stops: on a stop id (the model's eos ids),
// at max_new_tokens, or when the caller's callback says so (stop strings, docs/formats.md
// "Sampling").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "infer/generation_types.h"
#include "model/decoder.h"

namespace ctune::infer {

// Generates for every prompt together. Each prompt must be non-empty and in vocabulary, and
// prompt + max_new_tokens must fit the model's context (ConfigError otherwise). Each sequence's
// sampled tokens are drawn from its own generator (its stream under `seed`, options.streams):
// the same seed, stream and prompt give the same output whatever else is in the batch. With num_beams > 1 this is beam_search() (the callback
// is not called: beams change until the end).
std::vector<Generation> generate(model::CausalLM& model, const std::vector<std::vector<std::int64_t>>& prompts,
                                 const GenerateOptions& options, GenerateStats* stats = nullptr,
                                 const TokenCallback& on_token = {});

// One prompt: its generated ids.
std::vector<std::int64_t> generate(model::CausalLM& model, const std::vector<std::int64_t>& prompt,
                                   const GenerateOptions& options);

}  // namespace ctune::infer
