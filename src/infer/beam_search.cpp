#include "infer/beam_search.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "infer/prompt_batch.h"

namespace ctune::infer {

namespace {

// The num_beams best finished hypotheses of one prompt (Hugging Face's BeamHypotheses).
class Hypotheses {
 public:
  explicit Hypotheses(const GenerateOptions& o) : options_(o) {}

  void add(std::vector<std::int64_t> ids, double sum_logprobs, std::int64_t generated_len, bool eos) {
    const double score = sum_logprobs / std::pow(static_cast<double>(generated_len), options_.length_penalty);
    const auto n = static_cast<std::size_t>(options_.num_beams);
    if (kept_.size() >= n && score <= worst_) return;
    kept_.push_back({std::move(ids), eos ? "eos" : "length", score});
    if (kept_.size() <= n) {
      worst_ = std::min(score, worst_);
      return;
    }
    // One too many: drop the worst (the earliest of equals) and remember the next worst.
    std::vector<std::pair<double, std::size_t>> ranked;
    for (std::size_t i = 0; i < kept_.size(); ++i) ranked.emplace_back(kept_[i].score, i);
    std::sort(ranked.begin(), ranked.end());
    kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(ranked[0].second));
    worst_ = ranked[1].first;
  }

  // Whether no running beam can still enter the kept set: `best_sum` is the best running sum,
  // `generated_len` the length the hypotheses of this step have.
  bool is_done(double best_sum, std::int64_t generated_len) const {
    if (static_cast<std::int64_t>(kept_.size()) < options_.num_beams) return false;
    if (options_.early_stopping == EarlyStopping::first) return true;
    // A positive penalty rewards length: under `never` the best a running beam can reach is at
    // max_new_tokens. The heuristic (and any penalty <= 0) judges it at the current length.
    const bool longest = options_.early_stopping == EarlyStopping::never && options_.length_penalty > 0;
    const auto length = static_cast<double>(longest ? options_.max_new_tokens : generated_len);
    return worst_ >= best_sum / std::pow(length, options_.length_penalty);
  }

  // The best hypothesis; among equal scores the last added.
  Generation best() const {
    std::size_t at = 0;
    for (std::size_t i = 1; i < kept_.size(); ++i)
      if (kept_[i].score >= kept_[at].score) at = i;
    return kept_[at];
  }

 private:
  const GenerateOptions& options_;
  std::vector<Generation> kept_;
  double worst_ = 1e9;
};

// The options beam search refuses before it looks at the prompts.
void check_beam_options(const GenerateOptions& o) {
  if (o.num_beams < 1) throw ConfigError("num_beams: expected >= 1, found " + std::to_string(o.num_beams));
  if (o.sampling.do_sample) {
    throw ConfigError("beam search samples nothing: sampling with num_beams > 1 (beam sampling) is not implemented; "
                      "use --temperature 0 with --num-beams, or --num-beams 1 to sample");
  }
}

// `logp` [rows, V] with the repetition penalty and the no-repeat n-grams of each row's tokens
// `seq` applied.
at::Tensor penalised(const at::Tensor& logp, const std::vector<std::vector<std::int64_t>>& seq, const SamplingOptions& penalties) {
  std::vector<at::Tensor> processed;
  for (std::int64_t r = 0; r < logp.size(0); ++r) processed.push_back(process_logits(logp[r], seq[static_cast<std::size_t>(r)], penalties));
  return at::stack(processed);
}

// Prompts still running when the tokens run out: their beams (row k * nb + j is beam j of
// live[k]) join the hypotheses as they stand.
void add_running_beams(const std::vector<std::vector<std::int64_t>>& prompts, const std::vector<std::int64_t>& live,
                       const std::vector<bool>& done, const std::vector<std::vector<std::int64_t>>& seq, const std::vector<double>& sums,
                       std::int64_t nb, std::vector<Hypotheses>& hyps) {
  for (std::size_t k = 0; k < live.size(); ++k) {
    const auto bi = static_cast<std::size_t>(live[k]);
    if (done[bi]) continue;
    const auto prompt_len = static_cast<std::ptrdiff_t>(prompts[bi].size());
    for (std::int64_t j = 0; j < nb; ++j) {
      const auto r = static_cast<std::size_t>(static_cast<std::int64_t>(k) * nb + j);
      hyps[bi].add({seq[r].begin() + prompt_len, seq[r].end()}, sums[r], static_cast<std::int64_t>(seq[r].size()) - prompt_len, false);
    }
  }
}

// Every prompt's nb beams as the prompt itself (rows b * nb + j), with their running sums of
// log-probabilities: only the first beam may expand at first (the others start at -1e9), so the
// first step's candidates are distinct.
void start_beams(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t nb, std::vector<std::vector<std::int64_t>>& seq,
                 std::vector<double>& sums) {
  const auto B = static_cast<std::int64_t>(prompts.size());
  sums.assign(static_cast<std::size_t>(B * nb), -1e9);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t j = 0; j < nb; ++j) seq.push_back(prompts[static_cast<std::size_t>(b)]);
    sums[static_cast<std::size_t>(b * nb)] = 0;
  }
}

// The rows (this step's numbering) and the prompts that go on: those of the prompts not done.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> going_on(const std::vector<std::int64_t>& live, const std::vector<bool>& done,
                                                                         std::int64_t nb) {
  std::vector<std::int64_t> kept, next_live;
  for (std::size_t k = 0; k < live.size(); ++k) {
    const auto b = live[k];
    if (done[static_cast<std::size_t>(b)]) continue;
    next_live.push_back(b);
    for (std::int64_t j = 0; j < nb; ++j) kept.push_back(static_cast<std::int64_t>(k) * nb + j);
  }
  return {kept, next_live};
}

}  // namespace

std::vector<Generation> beam_search(model::CausalLM& lm, const std::vector<std::vector<std::int64_t>>& prompts,
                                    const GenerateOptions& o, GenerateStats* stats) {
  const auto B = static_cast<std::int64_t>(prompts.size());
  const auto nb = o.num_beams;
  check_beam_options(o);
  std::vector<Generation> out(prompts.size());
  if (B == 0) return out;
  check_prompts(lm, prompts, o.max_new_tokens);
  const auto V = lm->config().vocab_size;
  if (nb > V) throw ConfigError("num_beams: " + std::to_string(nb) + " is more than the vocabulary of " + std::to_string(V));
  at::NoGradGuard no_grad;
  const bool was_training = lm->is_training();
  lm->eval();
  const at::Device device = lm->parameters().front().device();
  GenerateStats local;
  GenerateStats& s = stats ? *stats : local;

  auto batch = left_pad(prompts, nb, o.max_new_tokens, device);
  s.prefill_tokens += batch.prompt_tokens;
  require_cache_fits(lm, batch.input_ids.size(0), batch.longest, batch.longest + o.max_new_tokens);
  auto cache = lm->new_cache(batch.longest + o.max_new_tokens);
  auto in = batch.prefill(cache);
  at::Tensor mask = batch.attention_mask;  // the rows of the prompts still running

  // Row k * nb + j is beam j of live[k], the k-th prompt still running: its tokens (prompt +
  // generated) and running sum of log-probabilities (start_beams). A prompt whose hypotheses
  // are done leaves the batch: its rows stop computing.
  std::vector<std::int64_t> live(static_cast<std::size_t>(B));
  std::iota(live.begin(), live.end(), 0);
  std::vector<std::vector<std::int64_t>> seq;
  std::vector<double> sums;
  start_beams(prompts, nb, seq, sums);
  std::vector<Hypotheses> hyps(prompts.size(), Hypotheses(o));
  std::vector<bool> done(prompts.size(), false);
  // Enough candidates that num_beams of them are not eos even when every eos id ranks high.
  const auto keep = std::min(nb * V, std::max<std::int64_t>(2, 1 + static_cast<std::int64_t>(o.stop_ids.size())) * nb);
  auto is_stop = [&](std::int64_t t) { return std::find(o.stop_ids.begin(), o.stop_ids.end(), t) != o.stop_ids.end(); };
  SamplingOptions penalties = o.sampling;  // the processors only; candidates are chosen below
  const bool penalise = penalties.repetition_penalty != 1.0 || penalties.no_repeat_ngram_size > 0;

  auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < o.max_new_tokens; ++step) {
    const auto L = static_cast<std::int64_t>(live.size()), rows = L * nb;
    const auto logits = last_logits(lm, in);
    check_logits(logits);
    auto logp = at::log_softmax(logits, -1);  // [rows, V]
    if (penalise) logp = penalised(logp, seq, penalties);
    auto total = (logp.to(at::kDouble) + at::tensor(sums, at::kDouble).unsqueeze(1)).view({L, nb * V});
    auto [top, index] = total.topk(keep, /*dim=*/1, /*largest=*/true, /*sorted=*/true);
    const auto top_a = top.accessor<double, 2>();
    const auto index_a = index.accessor<std::int64_t, 2>();

    std::vector<std::int64_t> source(static_cast<std::size_t>(rows)), token(static_cast<std::size_t>(rows), 0);
    std::vector<double> next_sums(static_cast<std::size_t>(rows), 0);
    for (std::int64_t k = 0; k < L; ++k) {
      const auto bi = static_cast<std::size_t>(live[static_cast<std::size_t>(k)]);
      std::int64_t filled = 0;
      const auto prompt_len = static_cast<std::ptrdiff_t>(prompts[bi].size());
      for (std::int64_t rank = 0; rank < keep && filled < nb; ++rank) {
        const auto row = k * nb + index_a[k][rank] / V;
        const auto t = index_a[k][rank] % V;
        const auto& from = seq[static_cast<std::size_t>(row)];
        if (is_stop(t)) {
          // Only an eos among the best num_beams candidates finishes a hypothesis.
          if (rank < nb) hyps[bi].add({from.begin() + prompt_len, from.end()}, top_a[k][rank], step + 1, true);
          continue;
        }
        const auto r = static_cast<std::size_t>(k * nb + filled++);
        source[r] = row;
        token[r] = t;
        next_sums[r] = top_a[k][rank];
      }
      done[bi] = hyps[bi].is_done(top_a[k][0], step + 1);
    }
    if (step == 0) {
      s.prefill_s = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
    } else {
      s.decode_tokens += rows;
    }

    // The beams move: each row of a prompt still running takes its source's tokens and cache,
    // plus its new token.
    auto [kept, next_live] = going_on(live, done, nb);
    if (next_live.empty()) break;
    std::vector<std::vector<std::int64_t>> next_seq;
    std::vector<double> kept_sums;
    std::vector<std::int64_t> kept_source, kept_token;
    for (const auto r : kept) {
      const auto ri = static_cast<std::size_t>(r);
      next_seq.push_back(seq[static_cast<std::size_t>(source[ri])]);
      next_seq.back().push_back(token[ri]);
      kept_sums.push_back(next_sums[ri]);
      kept_source.push_back(source[ri]);
      kept_token.push_back(token[ri]);
    }
    seq = std::move(next_seq);
    sums = std::move(kept_sums);
    const bool shrunk = next_live.size() != live.size();
    live = std::move(next_live);
    if (step + 1 == o.max_new_tokens) break;
    cache.select_rows(at::tensor(kept_source, at::kLong).to(device));
    if (shrunk) mask = mask.index_select(0, at::tensor(kept, at::kLong).to(device));  // a row keeps its prompt's padding
    in.input_ids = at::tensor(kept_token, at::kLong).view({static_cast<std::int64_t>(kept_token.size()), 1}).to(device);
    in.attention_mask = mask.narrow(1, 0, cache.length() + 1);
  }
  s.decode_s = seconds_since(t0);

  add_running_beams(prompts, live, done, seq, sums, nb, hyps);
  for (std::size_t bi = 0; bi < prompts.size(); ++bi) out[bi] = hyps[bi].best();
  if (was_training) lm->train();
  return out;
}

}  // namespace ctune::infer
