#include "infer/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "infer/beam_search.h"
#include "infer/prompt_batch.h"

namespace ctune::infer {

std::vector<Generation> generate(model::CausalLM& lm, const std::vector<std::vector<std::int64_t>>& prompts,
                                 const GenerateOptions& o, GenerateStats* stats, const TokenCallback& on_token) {
  const auto B = static_cast<std::int64_t>(prompts.size());
  std::vector<Generation> out(prompts.size());
  if (B == 0) return out;
  if (o.num_beams > 1) return beam_search(lm, prompts, o, stats);
  check_prompts(lm, prompts, o.max_new_tokens);
  at::NoGradGuard no_grad;
  const bool was_training = lm->is_training();
  lm->eval();
  if (!o.streams.empty() && o.streams.size() != prompts.size()) throw std::logic_error("generate: one sampling stream per prompt");
  std::vector<at::Generator> gens;  // one per sequence (greedy decoding draws nothing from them)
  for (std::size_t i = 0; i < prompts.size(); ++i)
    gens.push_back(at::make_generator<at::CPUGeneratorImpl>(stream_seed(o.seed, o.streams.empty() ? i : o.streams[i])));
  const at::Device device = lm->parameters().front().device();  // the model's; sampling runs on the host
  GenerateStats local;
  GenerateStats& s = stats ? *stats : local;

  // Consecutive copies of one prompt (a GRPO group, several samples of one prompt) go through
  // the prompt pass once; their cache rows and last logits are then copied to every copy. The
  // distinct prompts' longest is the batch's, so the copies line up with the padded batch.
  std::vector<std::vector<std::int64_t>> distinct;
  std::vector<std::int64_t> source;  // per sequence, its prompt's row in the prompt pass
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (i == 0 || prompts[i] != prompts[i - 1]) distinct.push_back(prompts[i]);
    source.push_back(static_cast<std::int64_t>(distinct.size()) - 1);
  }
  const bool copies = distinct.size() < prompts.size();
  auto batch = left_pad(prompts, 1, o.max_new_tokens, device);
  require_cache_fits(lm, batch.input_ids.size(0), batch.longest, batch.longest + o.max_new_tokens);
  auto cache = lm->new_cache(batch.longest + o.max_new_tokens);
  model::ForwardInputs in;
  if (copies) {
    const auto once = left_pad(distinct, 1, o.max_new_tokens, device);
    s.prefill_tokens += once.prompt_tokens;
    in = once.prefill(cache);
  } else {
    s.prefill_tokens += batch.prompt_tokens;
    in = batch.prefill(cache);
  }
  const auto rows_of = at::tensor(source, at::kLong);
  std::vector<std::vector<std::int64_t>> history(prompts.begin(), prompts.end());
  std::vector<bool> done(prompts.size(), false);
  std::vector<std::int64_t> next(prompts.size(), 0);
  std::int64_t running = B;
  auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < o.max_new_tokens && running > 0; ++step) {
    auto last = last_logits(lm, in);  // [B, V] (the prompt pass: a row per distinct prompt)
    if (step == 0 && copies) {
      last = last.index_select(0, rows_of);
      cache.select_rows(rows_of.to(device));
    }
    for (std::int64_t b = 0; b < B; ++b) {
      const auto i = static_cast<std::size_t>(b);
      if (done[i]) continue;
      next[i] = choose_token(process_logits(last[b], history[i], o.sampling), o.sampling, gens[i]);
      if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next[i]) != o.stop_ids.end()) {
        out[i].stop_reason = "eos";
        out[i].stop_id = next[i];
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
    in.attention_mask = batch.attention_mask.narrow(1, 0, cache.length() + 1);
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
