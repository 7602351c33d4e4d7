#include "infer/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace ctune::infer {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
}  // namespace

std::vector<Generation> generate(model::CausalLM& lm, const std::vector<std::vector<std::int64_t>>& prompts,
                                 const GenerateOptions& o, GenerateStats* stats, const TokenCallback& on_token) {
  const auto B = static_cast<std::int64_t>(prompts.size());
  std::vector<Generation> out(prompts.size());
  if (B == 0) return out;
  check_prompts(lm, prompts, o.max_new_tokens);
  at::NoGradGuard no_grad;
  const bool was_training = lm->is_training();
  lm->eval();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const at::Device device = lm->parameters().front().device();  // the model's; sampling runs on the host
  GenerateStats local;
  GenerateStats& s = stats ? *stats : local;

  // The prompts left-padded to the longest (padding: id 0, mask 0), so every sequence's next
  // token comes from the same last column; positions count each sequence's real tokens.
  std::int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<std::int64_t>(p.size()));
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * longest), 0), mask(ids.size(), 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[static_cast<std::size_t>(b)];
    const auto pad = longest - static_cast<std::int64_t>(p.size());
    for (std::size_t t = 0; t < p.size(); ++t) {
      ids[static_cast<std::size_t>(b * longest + pad) + t] = p[t];
      mask[static_cast<std::size_t>(b * longest + pad) + t] = 1;
    }
    s.prefill_tokens += static_cast<std::int64_t>(p.size());
  }
  const auto capacity = longest + o.max_new_tokens;
  auto attention_mask = at::ones({B, capacity}, at::kLong);
  attention_mask.narrow(1, 0, longest).copy_(at::tensor(mask, at::kLong).view({B, longest}));
  attention_mask = attention_mask.to(device);

  auto cache = lm->new_cache(capacity);
  model::ForwardInputs in;
  in.input_ids = at::tensor(ids, at::kLong).view({B, longest}).to(device);
  in.attention_mask = attention_mask.narrow(1, 0, longest);
  in.cache = &cache;
  std::vector<std::vector<std::int64_t>> history(prompts.begin(), prompts.end());
  std::vector<bool> done(prompts.size(), false);
  std::vector<std::int64_t> next(prompts.size(), 0);
  std::int64_t running = B;
  auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < o.max_new_tokens && running > 0; ++step) {
    // Only the last position's logits are needed: the head (a [V, H] matmul, the largest of a
    // small model) runs on it alone, not on every prompt position.
    auto hidden = lm->hidden(in);  // [B, T, H]
    auto last = lm->head(hidden.select(1, hidden.size(1) - 1)).to(at::kFloat).cpu();  // [B, V]
    for (std::int64_t b = 0; b < B; ++b) {
      const auto i = static_cast<std::size_t>(b);
      if (done[i]) continue;
      next[i] = choose_token(process_logits(last[b], history[i], o.sampling), o.sampling, gen);
      if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next[i]) != o.stop_ids.end()) {
        out[i].stop_reason = "eos";
      } else {
        out[i].ids.push_back(next[i]);
        history[i].push_back(next[i]);
        if (step > 0) ++s.decode_tokens;
        if (on_token && !on_token(i, out[i].ids)) out[i].stop_reason = "stop";
      }
      if (!out[i].stop_reason.empty()) {
        done[i] = true;
        --running;
      }
    }
    if (step == 0) {
      s.prefill_s = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
    }
    // Every sequence takes one more step (a finished one repeats its last token; nothing reads
    // what follows it), over the positions seen so far.
    in.input_ids = at::tensor(next, at::kLong).view({B, 1}).to(device);
    in.attention_mask = attention_mask.narrow(1, 0, cache.length() + 1);
  }
  s.decode_s = seconds_since(t0);
  for (auto& g : out)
    if (g.stop_reason.empty()) g.stop_reason = "length";
  if (was_training) lm->train();
  return out;
}

std::vector<std::int64_t> generate(model::CausalLM& lm, const std::vector<std::int64_t>& prompt, const GenerateOptions& o) {
  return generate(lm, std::vector<std::vector<std::int64_t>>{prompt}, o).front().ids;
}

}  // namespace ctune::infer
