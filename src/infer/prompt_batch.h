// What greedy/sampled generation and beam search share: checking prompts against the model, and
// laying them out as one left-padded batch whose attention mask covers the whole generation.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "model/decoder.h"

namespace ctune::infer {

// Throws ConfigError for an empty prompt, a token outside the vocabulary, or prompt +
// max_new_tokens past the model's context.
void check_prompts(const model::CausalLM& model, const std::vector<std::vector<std::int64_t>>& prompts,
                   std::int64_t max_new_tokens);

// The prompts left-padded to the longest (padding: id 0, mask 0), so every row's next token comes
// from the same last column; positions count each row's real tokens (from the mask). Each prompt
// fills `copies` consecutive rows (beam search's beams).
struct PromptBatch {
  at::Tensor input_ids;       // [rows, longest] on the model's device
  at::Tensor attention_mask;  // [rows, longest + max_new_tokens]: 1 token, 0 padding (later positions 1)
  std::int64_t longest = 0;
  std::int64_t prompt_tokens = 0;  // real tokens of all prompts, counted once

  // The prompt pass's inputs, appending to `cache`.
  model::ForwardInputs prefill(model::KVCache& cache) const;
};
// The KV cache of `rows` sequences: refused (MemoryError) when the prompts' share (`prompt_positions`
// each, written by the prompt pass) is past the memory the host can still hold, or the whole
// buffers (`capacity` positions each, reserved at once) past its address space; a warning, once,
// when writing every row to `capacity` would pass the memory (a sequence that stops early never
// writes the rest of its buffer, so that may still fit). Host memory only.
void require_cache_fits(const model::CausalLM& lm, std::int64_t rows, std::int64_t prompt_positions, std::int64_t capacity);

PromptBatch left_pad(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t copies, std::int64_t max_new_tokens,
                     const at::Device& device);

// The logits after the last position of every row, [rows, V] on the host in float32 (float64
// when the model computes in float64). Only the last position goes through the head, a [V, H]
// matmul and the largest of a small model.
at::Tensor last_logits(model::CausalLM& model, const model::ForwardInputs& in);

}  // namespace ctune::infer
