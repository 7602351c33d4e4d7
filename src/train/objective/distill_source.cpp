#include "train/objective/distill_source.h"

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "infer/batched.h"
#include "infer/sampling.h"
#include "train/step/batches.h"

namespace ctune::train {

DistillSource::DistillSource(model::CausalLM student, model::CausalLM teacher, data::Sampler& sampler, data::Examples examples,
                             const tok::Tokenizer& tokenizer, DistillSourceOptions options)
    : student_(std::move(student)),
      teacher_(std::move(teacher)),
      sampler_(sampler),
      examples_(std::move(examples)),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      index_(options_.first_step * options_.grad_accum) {}

bool DistillSource::on_policy(std::uint64_t seed, std::int64_t index, double lmbda) {
  // A uniform draw in [0, 1) of its own stream (not the sampling seed of the same index).
  const std::uint64_t bits = infer::stream_seed(seed ^ 0x64697374696c6cULL, static_cast<std::uint64_t>(index));
  return static_cast<double>(bits >> 11) * 0x1.0p-53 < lmbda;
}

std::vector<std::int32_t> DistillSource::prompt_of(const data::Example& e) {
  auto end = e.labels.size();
  while (end > 0 && e.labels[end - 1] == data::kIgnoreIndex) --end;  // after the last trained token
  while (end > 0 && e.labels[end - 1] != data::kIgnoreIndex) --end;  // the last trained span's start
  return std::vector<std::int32_t>(e.ids.begin(), e.ids.begin() + static_cast<std::ptrdiff_t>(end));
}

std::string DistillSource::decode(const std::vector<std::int64_t>& ids) const { return tok::decode_generated(tokenizer_, ids); }

TensorBatch DistillSource::next() {
  if (micro_ >= static_cast<double>(options_.grad_accum)) micro_ = on_ = rows_ = tokens_ = clipped_ = seconds_ = 0;  // a new step
  const std::int64_t index = index_++;
  micro_ += 1;
  const data::Batch all = sampler_.next();
  const auto begin = all.rows * options_.rank / options_.ranks, end = all.rows * (options_.rank + 1) / options_.ranks;
  const DistillOptions& o = options_.objective;
  const bool on = on_policy(options_.seed, index, o.lmbda);
  on_ += on ? 1 : 0;
  if (on) return sampled(student_, all, begin, end, index, true);
  if (o.seq_kd) return sampled(teacher_, all, begin, end, index, false);
  return begin < end ? to_tensors(all.slice_rows(begin, end), options_.device) : idle_batch();
}

// Rows [begin, end) of `all` with their completions sampled by `model` (the student, whole under
// full_shard for the call, which every rank makes; or the teacher).
TensorBatch DistillSource::sampled(model::CausalLM& model, const data::Batch& all, std::int64_t begin, std::int64_t end,
                                   std::int64_t index, bool student) {
  const DistillOptions& o = options_.objective;
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::vector<std::int64_t>> inputs;
  infer::BatchedGeneration bg;
  for (std::int64_t r = begin; r < end; ++r) {
    prompts.push_back(prompt_of((*examples_)[static_cast<std::size_t>(all.examples[static_cast<std::size_t>(r)])]));
    inputs.emplace_back(prompts.back().begin(), prompts.back().end());
    bg.options.streams.push_back(static_cast<std::uint64_t>(r));
  }
  bg.options.max_new_tokens = o.max_new_tokens;
  bg.options.sampling.do_sample = true;
  bg.options.sampling.temperature = o.temperature;
  bg.options.sampling.top_k = o.top_k;
  bg.options.sampling.top_p = o.top_p;
  bg.options.stop_ids = options_.stop_ids;
  bg.options.seed = infer::stream_seed(options_.seed, static_cast<std::uint64_t>(index));
  bg.batch = std::max<std::size_t>(1, inputs.size());
  bg.stops = o.stop;
  bg.decode = [this](const std::vector<std::int64_t>& ids) { return decode(ids); };
  bg.progress = false;
  std::vector<std::vector<std::int64_t>> completions(inputs.size());
  const auto start = std::chrono::steady_clock::now();
  auto run = [&] {
    infer::generate_in_batches(model, inputs, bg, {}, [&](const infer::PromptResult& p) {
      auto& c = completions[p.prompt];
      c = p.generation.ids;
      if (p.generation.stop_reason == "eos") c.push_back(p.generation.stop_id);
      clipped_ += p.generation.stop_reason == "length" ? 1 : 0;
    });
  };
  if (student && options_.with_whole_model) {
    options_.with_whole_model(run);
  } else {
    run();
  }
  seconds_ += seconds_since(start);
  if (begin == end) return idle_batch();
  std::vector<const std::vector<std::int32_t>*> prompt_ptrs;
  for (const auto& p : prompts) prompt_ptrs.push_back(&p);
  for (const auto& c : completions) rows_ += 1, tokens_ += static_cast<double>(c.size());
  std::vector<std::int64_t> examples(all.examples.begin() + begin, all.examples.begin() + end);
  return to_tensors(prompt_completion_rows(prompt_ptrs, completions, {}, std::move(examples), options_.pad_id), options_.device);
}

std::vector<std::pair<std::string, double>> DistillSource::figures() const {
  std::vector<std::pair<std::string, double>> out = {{"on_policy", micro_ > 0 ? on_ / micro_ : 0.0}};
  if (rows_ > 0) {
    out.emplace_back("completions/mean_length", tokens_ / rows_);
    out.emplace_back("completions/clipped_ratio", clipped_ / rows_);
    out.emplace_back("time/generation_s", seconds_);
  }
  return out;
}

}  // namespace ctune::train
