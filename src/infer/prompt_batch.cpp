#include "infer/prompt_batch.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "ops/memory.h"

namespace ctune::infer {

void require_cache_fits(const model::CausalLM& lm, std::int64_t rows, std::int64_t prompt_positions, std::int64_t capacity) {
  if (!lm->parameters().front().device().is_cpu()) return;  // a device's allocator fails with its own catchable error
  const std::int64_t prompts = lm->cache_bytes(rows, prompt_positions), full = lm->cache_bytes(rows, capacity);
  const auto what = "generation's KV cache for " + std::to_string(rows) + " sequences";
  const auto each = std::to_string(capacity) + " positions each";
  // The whole cache fitting (the usual case) answers for the prompts' share too.
  if (ops::host_memory_shortfall(what, {full, full}, each).empty()) return;
  // Its buffers are reserved whole at the prompt pass (address space); pages are written as
  // positions fill, the prompts' at once.
  ops::require_host_memory(what, {prompts, full},
                           "buffers of " + each + ", " + format_bytes(full) + ", reserved at the prompt pass, which writes " +
                               std::to_string(prompt_positions) + " of them, " + format_bytes(prompts));
  static bool warned = false;
  if (const auto line = ops::host_memory_shortfall(what, {full, 0}, each); !line.empty() && !warned) {
    warned = true;
    spdlog::warn("{}: if the sequences run that long the kernel ends the process first (fewer sequences at a time, or fewer new tokens, fit)",
                 line);
  }
}

void check_prompts(const model::CausalLM& lm, const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t max_new) {
  const auto& c = lm->config();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const std::string which = prompts.size() > 1 ? "prompt " + std::to_string(i + 1) : "the prompt";
    if (prompts[i].empty()) throw ConfigError("generate: " + which + " has no tokens");
    for (auto id : prompts[i]) {
      if (id < 0 || id >= c.vocab_size) {
        throw ConfigError("generate: " + which + " has token " + std::to_string(id) + ", outside the vocabulary of " +
                          std::to_string(c.vocab_size));
      }
    }
    const auto length = static_cast<std::int64_t>(prompts[i].size()) + max_new;
    if (length > c.max_position_embeddings) {
      throw ConfigError("generate: " + which + " has " + std::to_string(prompts[i].size()) + " tokens; with " +
                        std::to_string(max_new) + " new tokens that is " + std::to_string(length) +
                        " positions, past the model's context of " + std::to_string(c.max_position_embeddings) +
                        " (max_position_embeddings): shorten the prompt or --max-new-tokens");
    }
  }
}

PromptBatch left_pad(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t copies, std::int64_t max_new,
                     const at::Device& device) {
  PromptBatch batch;
  for (const auto& p : prompts) batch.longest = std::max(batch.longest, static_cast<std::int64_t>(p.size()));
  const auto rows = static_cast<std::int64_t>(prompts.size()) * copies;
  const auto L = batch.longest;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * L), 0), mask(ids.size(), 0);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    const auto pad = L - static_cast<std::int64_t>(p.size());
    for (std::int64_t c = 0; c < copies; ++c) {
      const auto row = static_cast<std::int64_t>(i) * copies + c;
      std::copy(p.begin(), p.end(), ids.begin() + row * L + pad);
      std::fill_n(mask.begin() + row * L + pad, p.size(), 1);
    }
    batch.prompt_tokens += static_cast<std::int64_t>(p.size());
  }
  auto attention_mask = at::ones({rows, L + max_new}, at::kLong);
  attention_mask.narrow(1, 0, L).copy_(at::tensor(mask, at::kLong).view({rows, L}));
  batch.attention_mask = attention_mask.to(device);
  batch.input_ids = at::tensor(ids, at::kLong).view({rows, L}).to(device);
  return batch;
}

model::ForwardInputs PromptBatch::prefill(model::KVCache& cache) const {
  model::ForwardInputs in;
  in.input_ids = input_ids;
  in.attention_mask = attention_mask.narrow(1, 0, longest);
  in.cache = &cache;
  return in;
}

at::Tensor last_logits(model::CausalLM& lm, const model::ForwardInputs& in) {
  auto hidden = lm->hidden(in);  // [rows, T, H]
  auto logits = lm->head(hidden.select(1, hidden.size(1) - 1));
  return logits.to(logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat).cpu();
}

}  // namespace ctune::infer
