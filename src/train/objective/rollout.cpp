#include "train/objective/rollout.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "infer/batched.h"
#include "train/objective/grpo.h"
#include "train/objective/logps.h"
#include "train/objective/shared_prompt.h"
#include "train/step/batches.h"

namespace ctune::train {
namespace {

// The reward functions' weights, [F] float64.
at::Tensor weights_of(const std::vector<std::unique_ptr<RewardFunction>>& rewards) {
  std::vector<double> w;
  for (const auto& f : rewards) w.push_back(f->weight());
  return at::tensor(w, at::kDouble);
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double std_of(const std::vector<double>& v) {  // Bessel-corrected, as torch.std
  if (v.size() < 2) return 0.0;
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

}  // namespace

std::uint64_t RolloutSource::generation_seed(std::uint64_t seed, std::int64_t index) {
  // Distinct, reproducible seeds per generation batch (splitmix64 of the pair).
  return infer::stream_seed(seed, static_cast<std::uint64_t>(index));
}

RolloutSource::RolloutSource(model::CausalLM policy, model::CausalLM reference, data::Sampler& prompts, data::Examples examples,
                             std::shared_ptr<const std::vector<OrderedJson>> records, const tok::Tokenizer& tokenizer,
                             RolloutOptions options)
    : policy_(std::move(policy)),
      reference_(std::move(reference)),
      prompts_(prompts),
      examples_(std::move(examples)),
      records_(std::move(records)),
      tokenizer_(tokenizer),
      options_(std::move(options)) {
  rewards_ = make_rewards(options_.objective.rewards, options_.objective.max_new_tokens);
  if (!records_) throw std::logic_error("RolloutSource: the prompts' records are missing (data.format must be prompt)");
  // A resumed run continues the count, so its generation batches draw the seeds they would have.
  generation_ = options_.first_step / std::max<std::int64_t>(1, options_.objective.num_iterations);
}

std::string RolloutSource::decode(const std::vector<std::int64_t>& ids) const { return tok::decode_generated(tokenizer_, ids); }

TensorBatch RolloutSource::next() {
  if (next_ == batches_.size()) {
    next_ = 0;
    if (batches_.empty() || ++pass_ == options_.objective.num_iterations) {
      pass_ = 0;
      generate_batch();
    }
  }
  return batches_[next_++];
}

// One sampled completion and what it scored.
struct RolloutSource::Sample {
  std::int64_t example = 0;               // the prompt's example
  std::vector<std::int64_t> completion;   // trained tokens: the generated ids and the stop id that ended them
  std::string text;                       // decoded, cut before a stop string
  std::string stop_reason;
  std::vector<double> scores;             // per reward function
  double reward = 0;
};

// The generation batch's prompts: grad_accum global prompt batches, this rank's share of each
// (whole prompts), each prompt G times; every copy's sampling stream is its row in the whole
// generation batch.
struct RolloutSource::Prompts {
  std::vector<std::vector<std::int64_t>> group_examples;  // per prompt batch, this rank's examples
  std::vector<std::vector<std::int64_t>> inputs;          // per copy, its prompt's ids
  std::vector<std::uint64_t> streams;                     // per copy, its row in the whole generation batch
  std::size_t global_rows = 0;                            // the whole generation batch's rows (every rank's)
};

// The whole generation batch's per-row figures, each rank filling its rows, summed over the
// ranks: per row its reward, each reward function's score, its length and whether the limit
// cut it.
struct RolloutSource::RewardTable {
  std::size_t rows = 0, functions = 0;
  std::vector<double> values;  // [rows, width()]

  std::size_t width() const { return functions + 3; }
  double* row(std::size_t r) { return values.data() + r * width(); }
  std::vector<double> column(std::size_t c) const {
    std::vector<double> v(rows);
    for (std::size_t i = 0; i < rows; ++i) v[i] = values[i * width() + c];
    return v;
  }
  std::vector<double> rewards() const { return column(0); }
  std::vector<double> scores(std::size_t f) const { return column(1 + f); }
  std::vector<double> lengths() const { return column(functions + 1); }
  std::vector<double> truncated() const { return column(functions + 2); }
  // Every function's scores, [rows, functions] float64.
  at::Tensor score_matrix() const {
    return at::tensor(values, at::kDouble).view({static_cast<std::int64_t>(rows), static_cast<std::int64_t>(width())})
        .narrow(1, 1, static_cast<std::int64_t>(functions)).contiguous();
  }
};

void RolloutSource::generate_batch() {
  const auto start = std::chrono::steady_clock::now();
  const Prompts prompts = take_prompts();                   // 1.
  std::vector<Sample> samples = sample(prompts);            // 2.
  const double generation_s = seconds_since(start);
  const auto score_start = std::chrono::steady_clock::now();
  const std::vector<std::string> prompt_texts = score(prompts, samples);  // 3.
  const RewardTable table = reward_table(prompts, samples);
  make_batches(prompts, samples);                           // 4. (their advantages after 5.)
  const std::vector<double> kl = keep_logps(prompts);       // 5.
  const std::vector<double> row_advantages = rank_advantages(table, kl, prompts, samples);
  set_advantages(row_advantages);
  const double scoring_s = seconds_since(score_start);
  report(table, samples, generation_s, scoring_s);          // 6.
  keep_samples(prompt_texts, samples, row_advantages);
}

// 1. The generation batch's prompts (Prompts).
RolloutSource::Prompts RolloutSource::take_prompts() {
  const std::int64_t G = options_.objective.num_generations;
  Prompts p;
  for (std::int64_t k = 0; k < options_.grad_accum; ++k) {
    const std::vector<std::int64_t> all = prompts_.next().examples;
    const auto n = static_cast<std::int64_t>(all.size());
    const auto begin = n * options_.rank / options_.ranks, end = n * (options_.rank + 1) / options_.ranks;
    auto& mine = p.group_examples.emplace_back(all.begin() + begin, all.begin() + end);
    for (std::size_t j = 0; j < mine.size(); ++j) {
      const auto& ids = (*examples_)[static_cast<std::size_t>(mine[j])].ids;
      for (std::int64_t g = 0; g < G; ++g) {
        p.inputs.emplace_back(ids.begin(), ids.end());
        p.streams.push_back(p.global_rows + static_cast<std::size_t>((begin + static_cast<std::int64_t>(j)) * G + g));
      }
    }
    p.global_rows += static_cast<std::size_t>(n * G);
  }
  return p;
}

// 2. Sampled from the current policy, in one batch (what `ctune generate` samples for these
//    prompts with this seed).
std::vector<RolloutSource::Sample> RolloutSource::sample(const Prompts& prompts) {
  const GrpoOptions& o = options_.objective;
  infer::BatchedGeneration bg;
  bg.options.max_new_tokens = o.max_new_tokens;
  bg.options.sampling.do_sample = true;
  bg.options.sampling.temperature = o.temperature;
  bg.options.sampling.top_k = o.top_k;
  bg.options.sampling.top_p = o.top_p;
  bg.options.stop_ids = options_.stop_ids;
  bg.options.seed = last_seed_ = generation_seed(options_.seed, generation_++);
  bg.options.streams = prompts.streams;
  bg.batch = std::max<std::size_t>(1, prompts.inputs.size());
  bg.stops = o.stop;
  bg.decode = [this](const std::vector<std::int64_t>& ids) { return decode(ids); };
  bg.progress = false;
  std::vector<Sample> samples(prompts.inputs.size());
  auto run = [&] {
    infer::generate_in_batches(policy_, prompts.inputs, bg, {}, [&](const infer::PromptResult& r) {
      Sample& s = samples[r.prompt];
      s.completion = r.generation.ids;
      if (r.generation.stop_reason == "eos") s.completion.push_back(r.generation.stop_id);
      s.text = r.text;
      s.stop_reason = r.generation.stop_reason;
    });
  };
  if (options_.with_whole_model) {
    options_.with_whole_model(run);
  } else {
    run();
  }
  return samples;
}

// 3. Each sample's rewards, summed with their weights. Returns each group's prompt as the
//    rewards and samples.jsonl see it.
std::vector<std::string> RolloutSource::score(const Prompts& prompts, std::vector<Sample>& samples) {
  const std::int64_t G = options_.objective.num_generations;
  std::vector<std::string> prompt_texts;
  std::size_t row = 0;
  for (const auto& batch : prompts.group_examples) {
    for (const std::int64_t e : batch) {
      const auto& example = (*examples_)[static_cast<std::size_t>(e)];
      const OrderedJson& fields = (*records_)[static_cast<std::size_t>(example.record)];
      const std::string where = "data.train record " + std::to_string(example.record + 1);
      const std::string& prompt = prompt_texts.emplace_back(decode(std::vector<std::int64_t>(example.ids.begin(), example.ids.end())));
      for (std::int64_t g = 0; g < G; ++g, ++row) {
        Sample& s = samples[row];
        s.example = e;
        for (const auto& f : rewards_) {
          const RewardSample in{prompt, s.text, static_cast<std::int64_t>(s.completion.size()), fields, where};
          s.scores.push_back(f->score(in));
          s.reward += f->weight() * s.scores.back();
        }
      }
    }
  }
  return prompt_texts;
}

//    The whole generation batch's figures (RewardTable): each rank fills its rows, the rest are
//    zeros, so the sum over the ranks is exact.
RolloutSource::RewardTable RolloutSource::reward_table(const Prompts& prompts, const std::vector<Sample>& samples) const {
  RewardTable table;
  table.rows = prompts.global_rows;
  table.functions = rewards_.size();
  table.values.assign(table.rows * table.width(), 0.0);
  const std::size_t F = table.functions;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    double* at = table.row(prompts.streams[i]);
    at[0] = samples[i].reward;
    for (std::size_t f = 0; f < F; ++f) at[1 + f] = samples[i].scores[f];
    at[F + 1] = static_cast<double>(samples[i].completion.size());
    at[F + 2] = samples[i].stop_reason == "length" ? 1.0 : 0.0;
  }
  if (options_.sync && options_.ranks > 1) options_.sync->sum(table.values);
  return table;
}

//    This rank's samples' advantages within their groups, from the whole batch's rewards (so
//    scale_rewards: batch is the global one); a group whose rewards overflow is warned of once.
//    RLOO: each reward less beta times its completion's KL (`kl`, the whole batch's), the
//    baseline its siblings' mean.
std::vector<double> RolloutSource::rank_advantages(const RewardTable& table, const std::vector<double>& kl, const Prompts& prompts,
                                                   const std::vector<Sample>& samples) {
  const GrpoOptions& o = options_.objective;
  std::vector<double> totals = table.rewards();
  at::Tensor all_advantages;
  if (o.leave_one_out) {
    for (std::size_t i = 0; i < kl.size(); ++i) totals[i] -= o.beta * kl[i];
    all_advantages = leave_one_out_advantages(at::tensor(totals, at::kDouble), o.num_generations, o.normalize_advantages).contiguous();
  } else if (o.multi_objective_aggregation == "normalize_then_sum") {
    all_advantages = normalized_sum_advantages(table.score_matrix(), weights_of(rewards_), o.num_generations).contiguous();
  } else {
    all_advantages = group_advantages(at::tensor(totals, at::kDouble), o.num_generations, o.scale_rewards).contiguous();
  }
  const double* all = all_advantages.data_ptr<double>();
  std::vector<double> advantages(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) advantages[i] = all[prompts.streams[i]];
  if (!warned_overflow_) {
    const std::string note = overflow_note(totals, all, prompts.streams, samples);
    if (!note.empty()) spdlog::warn("{}", note);
    warned_overflow_ = !note.empty();
  }
  return advantages;
}

// A line about the first of this rank's groups whose rewards overflow their spread (finite
// answers near +-1e300: the mean or the variance is not finite, and the advantages are 0 or not
// finite, which ends as a group without signal or a skipped step), or "". `rewards`, `advantages`: the whole
// generation batch's rows; `streams`: this rank's samples' rows in it.
std::string RolloutSource::overflow_note(const std::vector<double>& rewards, const double* advantages, const std::vector<std::uint64_t>& streams,
                                         const std::vector<Sample>& samples) const {
  const std::int64_t G = options_.objective.num_generations;
  for (std::size_t i = 0; i < samples.size(); i += static_cast<std::size_t>(G)) {
    const auto first = static_cast<std::ptrdiff_t>(streams[i]);
    const std::vector<double> group(rewards.begin() + first, rewards.begin() + first + G);
    bool overflows = !std::isfinite(mean_of(group)) || !std::isfinite(std_of(group));
    for (std::int64_t g = 0; g < G; ++g) overflows = overflows || !std::isfinite(advantages[first + g]);
    if (!overflows) continue;
    std::string values;
    for (const double r : group) values += fmt::format("{}{:g}", values.empty() ? "" : ", ", r);
    return fmt::format("rewards: the group of data.train record {} ({}) overflows its spread (its mean or standard deviation is not "
                       "finite): its advantages are 0 or not finite, so it teaches nothing; keep rewards well inside +-1e150 (warned once)",
                       (*examples_)[static_cast<std::size_t>(samples[i].example)].record + 1, values);
  }
  return "";
}

// 4. One training batch per prompt batch (an idle batch for a rank without prompts in it).
void RolloutSource::make_batches(const Prompts& prompts, const std::vector<Sample>& samples) {
  const std::int64_t G = options_.objective.num_generations;
  batches_.clear();
  std::size_t row = 0;
  for (const auto& batch : prompts.group_examples) {
    const auto rows = static_cast<std::int64_t>(batch.size()) * G;
    if (rows == 0) {
      TensorBatch idle = idle_batch();
      idle.advantages = at::zeros({0}, at::kDouble);  // no rows: no units
      batches_.push_back(std::move(idle));
      continue;
    }
    batches_.push_back(training_batch(samples.data() + row, rows));
    row += static_cast<std::size_t>(rows);
  }
}

//    `n` samples (whole groups) as one batch: prompt + completion, right-padded, laid out as the
//    data layer lays out a batch and made tensors by its to_tensors.
TensorBatch RolloutSource::training_batch(const Sample* rows, std::int64_t n) const {
  const GrpoOptions& o = options_.objective;
  const std::int64_t G = o.num_generations;
  auto prompt_of = [&](const Sample& s) -> const auto& { return (*examples_)[static_cast<std::size_t>(s.example)].ids; };
  std::vector<const std::vector<std::int32_t>*> prompts;
  std::vector<std::vector<std::int64_t>> completions;
  std::vector<bool> trained;
  std::vector<std::int64_t> examples;
  for (std::int64_t r = 0; r < n; ++r) {
    prompts.push_back(&prompt_of(rows[r]));
    completions.push_back(rows[r].completion);
    trained.push_back(!(o.mask_truncated_completions && rows[r].stop_reason == "length"));
    examples.push_back(rows[r].example);
  }
  data::Batch b = prompt_completion_rows(prompts, completions, trained, std::move(examples), options_.pad_id);
  b.rows_per_group = G;
  const std::int64_t length = b.length;
  TensorBatch t = to_tensors(b, options_.device);
  t.advantages = at::zeros({n}, at::kDouble);  // one per completion; set_advantages fills them
  //    A group as one row after one copy of its prompt, where that is cheaper (shared_prompt.h).
  std::vector<std::int64_t> prompt_lengths, completion_lengths;
  for (std::int64_t r = 0; r < n; ++r) {
    if (r % G == 0) prompt_lengths.push_back(static_cast<std::int64_t>(prompt_of(rows[r]).size()));
    completion_lengths.push_back(static_cast<std::int64_t>(rows[r].completion.size()));
  }
  if (share_prompts_here(o.share_prompt, policy_->config(), {n, length}, shared_shape(prompt_lengths, completion_lengths, G)))
    t = share_prompts(t, prompt_lengths, G, options_.pad_id);
  return t;
}

// 5. The log-probabilities the loss compares with, without gradients: the sampling policy's
//    when its batches serve several passes (and always under RLOO, as TRL's), the reference's
//    when beta > 0. Every rank runs as many forwards (idle batches too: under full_shard they
//    gather). Returns, for RLOO with beta > 0, each completion's KL (the sum over its tokens of
//    old - ref, TRL's first-order estimate) by its row in the whole batch, summed over the
//    ranks; else nothing.
std::vector<double> RolloutSource::keep_logps(const Prompts& prompts) {
  const GrpoOptions& o = options_.objective;
  const bool penalty = o.leave_one_out && o.beta > 0;
  at::NoGradGuard no_grad;
  const bool was_training = policy_->is_training();
  policy_->eval();
  std::vector<double> kl(penalty ? prompts.global_rows : 0, 0.0);
  std::size_t sample = 0;
  for (auto& t : batches_) {
    TokenLogps old;
    if (o.num_iterations > 1 || o.leave_one_out) {
      old = token_logps(policy_, policy_hidden(policy_, t), t.labels, o.temperature, false, t.sequence_ids);
      t.old_logps = old.token;
    }
    if (o.beta > 0) t.ref_logps = reference_token_logps(policy_, reference_, t, o.temperature);
    if (!penalty) continue;
    const auto rows = t.advantages.size(0);
    const auto per_row = at::zeros({rows}, old.token.options()).index_add(0, old.row, old.token - t.ref_logps).to(at::kDouble).contiguous();
    for (std::int64_t r = 0; r < rows; ++r, ++sample) kl[prompts.streams[sample]] = per_row.data_ptr<double>()[r];
  }
  if (was_training) policy_->train();
  if (penalty && options_.sync && options_.ranks > 1) options_.sync->sum(kl);
  return kl;
}

//    Each training batch's advantages, its rows in the samples' order.
void RolloutSource::set_advantages(const std::vector<double>& advantages) {
  std::size_t at = 0;
  for (auto& t : batches_) {
    const auto rows = static_cast<std::size_t>(t.advantages.size(0));
    t.advantages = at::tensor(std::vector<double>(advantages.begin() + at, advantages.begin() + at + rows), at::kDouble);
    at += rows;
  }
}

// 6. What the step reports (TRL's names; the whole batch's, this rank's generation time).
void RolloutSource::report(const RewardTable& table, const std::vector<Sample>& samples, double generation_s, double scoring_s) {
  const std::int64_t G = options_.objective.num_generations;
  const std::vector<double> totals = table.rewards(), lengths = table.lengths(), truncated = table.truncated();
  std::int64_t completion_tokens = 0;
  for (const auto& s : samples) completion_tokens += static_cast<std::int64_t>(s.completion.size());
  std::vector<double> group_std;
  double zero_std = 0;
  for (std::size_t g = 0; g < totals.size(); g += static_cast<std::size_t>(G)) {
    group_std.push_back(std_of(std::vector<double>(totals.begin() + static_cast<std::ptrdiff_t>(g),
                                                   totals.begin() + static_cast<std::ptrdiff_t>(g) + G)));
    zero_std += group_std.back() == 0.0 ? 1.0 : 0.0;
  }
  figures_ = {{"reward", mean_of(totals)}, {"reward_std", mean_of(group_std)}};
  for (std::size_t f = 0; f < rewards_.size(); ++f) {
    const std::vector<double> v = table.scores(f);
    figures_.emplace_back("rewards/" + rewards_[f]->name() + "/mean", mean_of(v));
    figures_.emplace_back("rewards/" + rewards_[f]->name() + "/std", std_of(v));
  }
  for (const auto& f : rewards_)
    if (const auto errors = f->take_errors()) figures_.emplace_back("rewards/" + f->name() + "/errors", static_cast<double>(*errors));
  figures_.emplace_back("frac_reward_zero_std", zero_std / static_cast<double>(std::max<std::size_t>(1, group_std.size())));
  figures_.emplace_back("completions/mean_length", mean_of(lengths));
  figures_.emplace_back("completions/max_length", lengths.empty() ? 0.0 : *std::max_element(lengths.begin(), lengths.end()));
  figures_.emplace_back("completions/clipped_ratio", mean_of(truncated));
  figures_.emplace_back("time/generation_s", generation_s);
  figures_.emplace_back("time/generation_tokens_per_s", static_cast<double>(completion_tokens) / std::max(1e-9, generation_s));
  figures_.emplace_back("time/scoring_s", scoring_s);
}

//    This rank's samples, kept for samples.jsonl.
void RolloutSource::keep_samples(const std::vector<std::string>& prompt_texts, const std::vector<Sample>& samples,
                                 const std::vector<double>& advantages) {
  const std::int64_t G = options_.objective.num_generations;
  samples_ = Json::array();
  std::size_t row = 0;
  for (const auto& prompt : prompt_texts) {
    Json group = {{"prompt", prompt}, {"completions", Json::array()}};
    for (std::int64_t g = 0; g < G; ++g, ++row) {
      const Sample& s = samples[row];
      Json scores = Json::object();
      for (std::size_t f = 0; f < rewards_.size(); ++f) scores[rewards_[f]->name()] = s.scores[f];
      group["completions"].push_back({{"text", s.text},
                                      {"reward", s.reward},
                                      {"advantage", advantages[row]},
                                      {"rewards", scores},
                                      {"tokens", s.completion.size()},
                                      {"stop", s.stop_reason}});
    }
    samples_.push_back(std::move(group));
  }
}

namespace {
// A training batch's tensors by name, as the checkpoint holds them (the first five always there).
constexpr const char* kBatchTensors[] = {"input_ids",  "labels",    "position_ids", "segment_ids", "advantages",
                                         "old_logps",  "ref_logps", "prefix_ids",   "sequence_ids"};
constexpr at::Tensor TensorBatch::*kBatchFields[] = {&TensorBatch::input_ids,    &TensorBatch::labels,     &TensorBatch::position_ids,
                                                     &TensorBatch::segment_ids,  &TensorBatch::advantages, &TensorBatch::old_logps,
                                                     &TensorBatch::ref_logps,    &TensorBatch::prefix_ids, &TensorBatch::sequence_ids};
}  // namespace

SourceState RolloutSource::state() const {
  SourceState s;
  if (batches_.empty() || pass_ + 1 >= options_.objective.num_iterations) return s;  // the next step generates anew
  s.note = {{"generation", generation_}, {"pass", pass_}, {"seed", last_seed_}, {"samples", samples_}, {"batches", Json::array()}};
  Json figures = Json::array();
  for (const auto& [name, value] : figures_) figures.push_back({name, value});
  s.note["figures"] = figures;
  for (std::size_t i = 0; i < batches_.size(); ++i) {
    const TensorBatch& b = batches_[i];
    s.note["batches"].push_back({{"target_tokens", b.target_tokens}, {"rows_per_group", b.rows_per_group}, {"examples", b.examples}});
    for (std::size_t k = 0; k < std::size(kBatchTensors); ++k) {
      const at::Tensor& t = b.*kBatchFields[k];
      if (t.defined()) s.tensors.emplace_back("b" + std::to_string(i) + "." + kBatchTensors[k], t.cpu().contiguous());
    }
  }
  return s;
}

void RolloutSource::restore(const SourceState& state) {
  const Json& n = state.note;
  const std::string where = "the checkpoint's pending generation batch";
  try {
    const auto batches = n.at("batches");
    if (!batches.is_array() || static_cast<std::int64_t>(batches.size()) != options_.grad_accum)
      throw FormatError("expected " + std::to_string(options_.grad_accum) + " batches");
    std::map<std::string, at::Tensor> tensors(state.tensors.begin(), state.tensors.end());
    batches_.clear();
    for (std::size_t i = 0; i < batches.size(); ++i) {
      TensorBatch b;
      b.target_tokens = batches[i].at("target_tokens").get<std::int64_t>();
      b.rows_per_group = batches[i].at("rows_per_group").get<std::int64_t>();
      b.examples = batches[i].at("examples").get<std::vector<std::int64_t>>();
      for (std::size_t k = 0; k < std::size(kBatchTensors); ++k) {
        const auto it = tensors.find("b" + std::to_string(i) + "." + kBatchTensors[k]);
        if (it != tensors.end()) {
          b.*kBatchFields[k] = it->second.to(options_.device);
        } else if (k < 5) {
          throw FormatError("batch " + std::to_string(i) + " has no " + kBatchTensors[k]);
        }
      }
      batches_.push_back(std::move(b));
    }
    next_ = batches_.size();
    pass_ = n.at("pass").get<std::int64_t>();
    generation_ = n.at("generation").get<std::int64_t>();
    last_seed_ = n.at("seed").get<std::uint64_t>();
    samples_ = n.at("samples");
    figures_.clear();
    for (const auto& f : n.at("figures")) figures_.emplace_back(f.at(0).get<std::string>(), f.at(1).get<double>());
  } catch (const FormatError& e) {
    throw FormatError(where + ": " + e.what());
  } catch (const std::exception& e) {
    throw FormatError(where + ": malformed (" + std::string(e.what()) + ")");
  }
}

Json RolloutSource::samples(std::int64_t groups) const {
  Json out = {{"seed", last_seed_}, {"groups", Json::array()}};
  for (std::size_t i = 0; i < samples_.size() && static_cast<std::int64_t>(i) < groups; ++i) out["groups"].push_back(samples_[i]);
  return out;
}

}  // namespace ctune::train
