#include "infer/batched.h"

#include <algorithm>
#include <optional>

#include "core/progress.h"

namespace ctune::infer {

std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops, bool* stopped) {
  std::size_t end = text.size();
  *stopped = false;
  for (const auto& s : stops) {
    const auto at = text.find(s);
    if (!s.empty() && at != std::string::npos && at <= end) {
      end = at;
      *stopped = true;
    }
  }
  if (*stopped) return text.substr(0, end);
  // Hold back an incomplete trailing character: a lead byte whose continuation bytes have not
  // all arrived.
  std::size_t i = end;
  std::size_t back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) --i, ++back;
  if (i > 0) {
    const auto lead = static_cast<unsigned char>(text[i - 1]);
    const std::size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
    if (need > back) end = i - 1;
  }
  return text.substr(0, end);
}

void generate_in_batches(model::CausalLM& model, const std::vector<std::vector<std::int64_t>>& prompts, const BatchedGeneration& g,
                         const std::function<void(std::size_t, const std::string&)>& on_text,
                         const std::function<void(const PromptResult&)>& done) {
  const std::size_t batch = std::max<std::size_t>(1, g.batch);
  std::optional<Stage> stage;
  if (g.progress && prompts.size() > 1) stage.emplace("generating", static_cast<std::int64_t>(prompts.size()), "prompts");
  for (std::size_t first = 0; first < prompts.size(); first += batch) {
    const auto last = std::min(prompts.size(), first + batch);
    const std::vector<std::vector<std::int64_t>> group(prompts.begin() + static_cast<std::ptrdiff_t>(first),
                                                        prompts.begin() + static_cast<std::ptrdiff_t>(last));
    GenerateStats stats;
    // Stop strings and streaming need the text at every token; otherwise nothing is decoded.
    const bool watch = !g.stops.empty() || on_text;
    auto on_token = [&](std::size_t i, const std::vector<std::int64_t>& ids) {
      if (!watch) return true;
      bool stopped = false;
      const auto text = cut_at_stop(g.decode(ids), g.stops, &stopped);
      if (on_text) on_text(first + i, text);
      return !stopped;
    };
    // Beam search calls no callback: its stop strings cut the final text only.
    // Each prompt samples from its stream in the whole set, whatever batch it lands in.
    GenerateOptions options = g.options;
    options.streams.clear();
    for (std::size_t i = first; i < last; ++i) options.streams.push_back(g.options.streams.empty() ? i : g.options.streams.at(i));
    auto out = generate(model, group, options, &stats, on_token);
    for (std::size_t i = 0; i < out.size(); ++i) {
      // Cut before a stop string; otherwise the whole text, a trailing partial character included.
      bool stopped = false;
      PromptResult r{first + i, std::move(out[i]), {}, group.size(), &stats};
      r.text = g.decode(r.generation.ids);
      const std::string cut = cut_at_stop(r.text, g.stops, &stopped);
      if (stopped) r.text = cut;
      if (r.generation.stop_reason == "stop" || stopped) r.generation.stop_reason = "stop_string";
      done(r);
    }
    if (stage) {
      stage->update(static_cast<std::int64_t>(last), 0, [&] {
        return std::to_string(static_cast<long long>(stats.decode_tokens / std::max(1e-9, stats.decode_s))) + " tok/s decode";
      });
    }
  }
  if (stage) stage->finish();
}

}  // namespace ctune::infer
