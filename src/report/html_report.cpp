#include "report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "io/file.h"
#include "io/run_layout.h"
#include "report/svg_plot.h"

namespace ctune::report {
namespace fs = std::filesystem;

namespace {

const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "unknown";
  const long t = std::lround(s);
  char b[32];
  std::snprintf(b, sizeof(b), "%ldh %02ldm %02lds", t / 3600, (t / 60) % 60, t % 60);
  return b;
}

template <typename F>
Points series_of(const RunData& r, F value) {
  Points p;
  for (const auto& s : r.steps) p.emplace_back(static_cast<double>(s.step), value(s));
  return p;
}

std::string label(const RunData& r, std::size_t i) {
  return i == 0 && r.dir.filename().empty() ? r.dir.string() : r.dir.filename().string();
}

std::string row(const std::string& key, const std::string& value) {
  return "<tr><th>" + html_escape(key) + "</th><td>" + html_escape(value) + "</td></tr>\n";
}

std::string header(const RunData& r) {
  std::string h = "<table class=\"header\">\n";
  h += row("run", fs::absolute(r.dir).string());
  std::string status = r.status;
  if (!r.resumes.empty()) {
    status += ", resumed " + std::to_string(r.resumes.size()) + (r.resumes.size() == 1 ? " time" : " times") + " (from step";
    for (auto s : r.resumes) status += " " + std::to_string(s);
    status += ")";
  }
  h += row("status", status);
  h += row("model", r.model.empty() ? "unknown" : r.model);
  h += row("method", r.method.empty() ? "unknown" : r.method);
  h += row("precision", r.precision.empty() ? "unknown" : r.precision);
  h += row("data", (r.train_data.empty() ? std::string("unknown") : r.train_data) + (r.eval_data.empty() ? "" : "; eval " + r.eval_data));
  const std::int64_t last = r.steps.empty() ? 0 : r.steps.back().step;
  std::int64_t tokens = 0;
  for (const auto& s : r.steps) tokens += s.tokens;
  h += row("steps", std::to_string(last) + (r.max_steps > 0 ? " of " + std::to_string(r.max_steps) : "") + " (" +
                        std::to_string(tokens) + " target tokens)");
  double wall = std::nan("");
  if (!r.steps.empty()) {
    const double first = r.steps.front().time - r.steps.front().elapsed_s;  // the first session's start
    wall = std::isfinite(first) ? r.steps.back().time - first : r.steps.back().elapsed_s;
  }
  h += row("wall time", duration(wall));
  if (!r.steps.empty()) h += row("final train loss", fmt("%.4f", r.steps.back().loss));
  if (!r.evals.empty()) {
    const auto best = std::min_element(r.evals.begin(), r.evals.end(), [](const auto& a, const auto& b) { return a.loss < b.loss; });
    h += row("final eval loss", fmt("%.4f", r.evals.back().loss) + " at step " + std::to_string(r.evals.back().step));
    h += row("best eval loss", fmt("%.4f", best->loss) + " at step " + std::to_string(best->step));
  }
  std::string ckpt;
  for (const auto& c : r.checkpoints) ckpt += (ckpt.empty() ? "" : ", ") + (r.dir / io::kCheckpointsDir / c).string();
  h += row("checkpoints", ckpt.empty() ? "none" : ckpt);
  h += row("result", r.result.empty() ? "not written yet" : (r.dir / r.result).string());
  return h + "</table>\n";
}

std::string ledger_table(const RunData& r) {
  if (!r.memory || !r.memory->contains("lines")) return "<p>No memory ledger in metrics.jsonl yet.</p>\n";
  const Json& m = *r.memory;
  std::string t = "<table class=\"ledger\"><tr><th>line</th><th>MB</th><th>formula</th></tr>\n";
  for (const auto& l : m["lines"]) {
    t += "<tr><td>" + html_escape(l.value("name", "")) + "</td><td class=\"num\">" + fmt("%.1f", l.value("bytes", 0.0) / 1e6) +
         "</td><td>" + html_escape(l.value("formula", "")) + "</td></tr>\n";
  }
  t += "<tr><th>predicted peak</th><td class=\"num\">" + fmt("%.1f", m.value("peak_bytes", 0.0) / 1e6) + "</td><td>" +
       html_escape(m.value("peak_formula", "")) + "</td></tr>\n";
  if (m.contains("measured_peak_bytes")) {
    t += "<tr><th>measured peak</th><td class=\"num\">" + fmt("%.1f", m["measured_peak_bytes"].get<double>() / 1e6) +
         "</td><td>resident memory high-water mark of training</td></tr>\n";
  }
  if (m.contains("measured_run_peak_bytes") && m["measured_run_peak_bytes"].is_number()) {
    t += "<tr><th>measured peak, whole run</th><td class=\"num\">" + fmt("%.1f", m["measured_run_peak_bytes"].get<double>() / 1e6) +
         "</td><td>the same with the final checkpoint and the result written (largest rank)</td></tr>\n";
  }
  return t + "</table>\n<p class=\"note\">symbols: " + html_escape(m.value("symbols", "")) + "</p>\n";
}

const char* kStyle = R"(
body{font-family:sans-serif;margin:24px;color:#222;max-width:1340px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:8px}
svg.plot{background:#fff}svg .frame{fill:none;stroke:#999}svg .grid{stroke:#eee}
svg text{font-size:11px;fill:#444}svg .title{font-size:13px;font-weight:bold;fill:#222}
svg .ytick{text-anchor:end}svg .xtick,svg .xlabel{text-anchor:middle}svg .ylabel{text-anchor:middle}
svg .resume{stroke:#888;stroke-dasharray:3 3}svg .reference{stroke:#d62728;stroke-dasharray:6 3}
svg .reflabel{text-anchor:end;fill:#d62728}svg .skipped{stroke:#d62728;stroke-width:2}
svg.log{display:none}#logscale:checked~.plots svg.log{display:inline}#logscale:checked~.plots svg.lin{display:none}
pre{background:#f6f6f6;padding:8px;font-size:12px;overflow:auto}.note{font-size:12px;color:#666}.problem{color:#b00}
code.sample{white-space:pre-wrap}
)";

}  // namespace

// A model with experts: the routers' load-balancing loss of every run, and per sparse layer of
// the first run each expert's share of the routed tokens over the steps (up to 16 experts one
// line each; more as the largest, median and smallest share), against the balanced share 1/E.
std::string experts_section(const std::vector<const RunData*>& runs) {
  std::vector<Series> aux;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    Points p;
    for (const auto& [step, value] : series_of(*runs[i], [](const StepRecord& s) { return s.aux_loss; }))
      if (std::isfinite(value)) p.emplace_back(step, value);
    if (!p.empty()) aux.push_back({(runs.size() > 1 ? label(*runs[i], i) + ": " : "") + "aux loss", kColours[i % 8], downsample(p)});
  }
  if (aux.empty()) return "";
  PlotOptions aux_o;
  aux_o.title = "routers' load-balancing loss";
  aux_o.y_label = "aux loss (before moe.aux_loss_coef)";
  std::string h = "<h2>Mixture of experts</h2>\n<div class=\"plots\">\n" + line_plot(aux, aux_o);
  std::map<std::int64_t, std::vector<std::pair<double, std::vector<double>>>> layers;  // layer -> (step, shares)
  for (const auto& s : runs.front()->steps)
    for (const auto& [layer, shares] : s.expert_load) layers[layer].emplace_back(static_cast<double>(s.step), shares);
  for (const auto& [layer, steps] : layers) {
    const std::size_t experts = steps.front().second.size();
    std::vector<Series> lines;
    if (experts <= 16) {
      for (std::size_t e = 0; e < experts; ++e) {
        Points p;
        for (const auto& [step, shares] : steps)
          if (e < shares.size()) p.emplace_back(step, shares[e]);
        lines.push_back({"expert " + std::to_string(e), kColours[e % 8], downsample(p), e >= 8});
      }
    } else {
      Points top, mid, low;
      for (const auto& [step, shares] : steps) {
        if (shares.empty()) continue;
        std::vector<double> sorted = shares;
        std::sort(sorted.begin(), sorted.end());
        low.emplace_back(step, sorted.front());
        mid.emplace_back(step, sorted[sorted.size() / 2]);
        top.emplace_back(step, sorted.back());
      }
      lines = {{"busiest expert", kColours[1], downsample(top)}, {"median expert", kColours[0], downsample(mid)},
               {"idlest expert", kColours[2], downsample(low)}};
    }
    PlotOptions o;
    o.title = "expert load, layer " + std::to_string(layer);
    o.y_label = "share of routed tokens";
    if (experts > 0) o.y_lines.emplace_back(1.0 / static_cast<double>(experts), "balanced (1/" + std::to_string(experts) + ")");
    h += line_plot(lines, o);
  }
  return h + "</div>\n";
}

// An objective's figure `key` over the records (steps or evaluations) that hold a finite value.
template <typename Record>
Points objective_points(const std::vector<Record>& records, const std::string& key) {
  Points p;
  for (const auto& s : records)
    if (auto it = s.objective.find(key); it != s.objective.end() && std::isfinite(it->second)) p.emplace_back(static_cast<double>(s.step), it->second);
  return p;
}

// A preference objective (DPO): per run, the rewards of the chosen and rejected responses and
// their margin, and the share of pairs whose chosen reward is higher, in training and on the
// eval split (TRL's rewards/*; docs/objectives.md).
std::string preference_section(const std::vector<const RunData*>& runs) {
  std::vector<Series> rewards, accuracy;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = *runs[i];
    const std::string name = runs.size() > 1 ? label(r, i) + ": " : "";
    auto train_points = [&](const std::string& key) { return objective_points(r.steps, key); };
    auto eval_points = [&](const std::string& key) { return objective_points(r.evals, key); };
    const char* keys[] = {"rewards/chosen", "rewards/rejected", "rewards/margins"};
    for (std::size_t k = 0; k < 3; ++k) {
      const std::string c = runs.size() > 1 ? kColours[i % 8] : kColours[k];
      const Points train = train_points(keys[k]), eval = eval_points(keys[k]);
      if (!train.empty()) rewards.push_back({name + keys[k], c, downsample(train), false, true});
      if (!eval.empty()) rewards.push_back({name + "eval " + keys[k], c, downsample(eval), true});
    }
    const Points train = train_points("rewards/accuracies"), eval = eval_points("rewards/accuracies");
    if (!train.empty()) accuracy.push_back({name + "train", kColours[i % 8], downsample(train), false, true});
    if (!eval.empty()) accuracy.push_back({name + "eval", kColours[i % 8], downsample(eval), true});
  }
  if (rewards.empty() && accuracy.empty()) return "";
  PlotOptions ro, ao;
  ro.title = "rewards";
  ro.y_label = "beta x log(pi / ref), mean over pairs";
  ao.title = "reward accuracy";
  ao.y_label = "share of pairs with chosen reward > rejected";
  ao.y_lines.emplace_back(0.5, "chance");
  std::string h = "<h2>Preference</h2>\n<div class=\"plots\">\n";
  if (!rewards.empty()) h += line_plot(rewards, ro);
  if (!accuracy.empty()) h += line_plot(accuracy, ao);
  return h + "</div>\n";
}

// On-policy distillation (docs/objectives.md#distillation): per run the share of each step's
// micro-batches the student sampled itself (smoothed), its samples' mean length, and the seconds
// each step spent generating. The divergence itself is the loss plot's.
std::string distill_section(const std::vector<const RunData*>& runs) {
  std::vector<Series> share, length, time;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = *runs[i];
    const Points on = objective_points(r.steps, "on_policy");
    if (on.empty()) continue;
    const std::string name = runs.size() > 1 ? label(r, i) + ": " : "", c = kColours[i % 8];
    share.push_back({name + "on-policy share (smoothed)", c, downsample(smoothed(on))});
    length.push_back({name + "mean length", c, downsample(objective_points(r.steps, "completions/mean_length"))});
    time.push_back({name + "generation", c, downsample(objective_points(r.steps, "time/generation_s"))});
  }
  if (share.empty()) return "";
  PlotOptions so, lo, to;
  so.title = "on-policy micro-batches";
  so.y_label = "share of the step's (objective.lmbda on average)";
  lo.title = "sampled completion length";
  lo.y_label = "tokens (on-policy steps)";
  to.title = "generation time per step";
  to.y_label = "s";
  return "<h2>Distillation</h2>\n<div class=\"plots\">\n" + line_plot(share, so) + line_plot(length, lo) + line_plot(time, to) + "</div>\n";
}

// Online RL (GRPO, docs/objectives.md#grpo): per run the mean reward (total, per function, and
// on the eval prompts when the run evaluates),
// the completions' lengths and the share cut by max_new_tokens, the policy's KL to the reference
// and its entropy, and the seconds each step spent generating and scoring; then the first run's
// latest samples (samples.jsonl): each prompt with its completions, rewards and advantages.
std::string rl_section(const std::vector<const RunData*>& runs) {
  std::vector<Series> reward, length, divergence, time;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = *runs[i];
    const std::string name = runs.size() > 1 ? label(r, i) + ": " : "";
    auto points = [&](const std::string& key) { return objective_points(r.steps, key); };
    const Points total = points("reward");
    if (total.empty()) continue;
    const std::string c = kColours[i % 8];
    reward.push_back({name + "reward (mean)", c, downsample(total), false, true});
    reward.push_back({name + "reward (smoothed)", c, downsample(smoothed(total))});
    if (const Points eval = objective_points(r.evals, "reward"); !eval.empty())
      reward.push_back({name + "eval reward (mean)", runs.size() > 1 ? c : kColours[7], downsample(eval), true});
    std::size_t f = 1;
    for (const auto& [key, value] : r.steps.back().objective) {
      if (key.rfind("rewards/", 0) != 0 || key.size() < 13 || key.compare(key.size() - 5, 5, "/mean") != 0) continue;
      reward.push_back({name + key.substr(8, key.size() - 13), runs.size() > 1 ? c : kColours[f++ % 8], downsample(points(key)), true});
    }
    length.push_back({name + "mean length", c, downsample(points("completions/mean_length"))});
    length.push_back({name + "max length", c, downsample(points("completions/max_length")), true});
    const Points kl = points("kl"), entropy = points("entropy");
    if (!kl.empty()) divergence.push_back({name + "KL to the reference", c, downsample(kl)});
    if (!entropy.empty()) divergence.push_back({name + "entropy", runs.size() > 1 ? c : kColours[1], downsample(entropy), true});
    time.push_back({name + "generation", c, downsample(points("time/generation_s"))});
    time.push_back({name + "scoring", runs.size() > 1 ? c : kColours[1], downsample(points("time/scoring_s")), true});
  }
  if (reward.empty()) return "";
  PlotOptions ro, lo, dio, to;
  ro.title = "reward";
  ro.y_label = "mean over the step's completions (dashed: each function)";
  lo.title = "completion length";
  lo.y_label = "tokens";
  dio.title = "KL and entropy";
  dio.y_label = "nats per completion token";
  to.title = "time per step";
  to.y_label = "s (the rest of the step trains)";
  std::string h = "<h2>Online RL</h2>\n<div class=\"plots\">\n" + line_plot(reward, ro) + line_plot(length, lo) +
                  (divergence.empty() ? std::string() : line_plot(divergence, dio)) + line_plot(time, to) + "</div>\n";
  const RunData& first = *runs[0];
  if (!first.samples) return h;
  const Json& s = *first.samples;
  auto text = [](const Json& v) {
    std::string t = v.is_string() ? v.get<std::string>() : v.dump();
    return t.size() > 400 ? t.substr(0, 400) + "..." : t;
  };
  auto number = [](const Json& v, const char* f) { return v.is_number() ? fmt(f, v.get<double>()) : std::string("?"); };
  h += "<h3>Latest samples (step " + text(s.value("step", Json())) + ", seed " + text(s.value("seed", Json())) + ")</h3>\n";
  std::size_t shown = 0;
  for (const auto& group : s["groups"]) {
    if (!group.is_object() || ++shown > 4) break;
    h += "<p class=\"note\">prompt: <code class=\"sample\">" + html_escape(text(group.value("prompt", Json("")))) + "</code></p>\n";
    h += "<table><tr><th>completion</th><th>reward</th><th>advantage</th><th>tokens</th><th>stop</th></tr>\n";
    for (const auto& c : group.value("completions", Json::array())) {
      if (!c.is_object()) continue;
      h += "<tr><td><code class=\"sample\">" + html_escape(text(c.value("text", Json("")))) + "</code></td><td>" + number(c.value("reward", Json()), "%.3g") +
           "</td><td>" + number(c.value("advantage", Json()), "%.3g") + "</td><td>" + number(c.value("tokens", Json()), "%.0f") + "</td><td>" +
           html_escape(text(c.value("stop", Json("")))) + "</td></tr>\n";
    }
    h += "</table>\n";
  }
  return h;
}

// logging.profile: where the first run's steps went (docs/performance.md). Per category, largest
// first, its median milliseconds per step, share and cost per token, the sum of the medians against the
// median step time; and a plot of the largest categories' milliseconds over the steps (the
// rest summed as "other"). The first profiled step warms up and is left out of the medians.
std::string profile_section(const RunData& run) {
  std::vector<const StepRecord*> steps;
  for (const auto& s : run.steps)
    if (!s.profile_ms.empty()) steps.push_back(&s);
  if (steps.empty()) return "";
  const std::size_t first = steps.size() > 1 ? 1 : 0;
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  std::vector<std::string> categories;  // as first seen
  for (const auto* s : steps)
    for (const auto& [category, ms] : s->profile_ms)
      if (std::find(categories.begin(), categories.end(), category) == categories.end()) categories.push_back(category);
  auto ms_of = [](const StepRecord& s, const std::string& category) {
    for (const auto& [c, ms] : s.profile_ms)
      if (c == category) return ms;
    return 0.0;
  };
  std::vector<std::pair<std::string, double>> medians;
  double total = 0;
  for (const auto& c : categories) {
    std::vector<double> v;
    for (std::size_t i = first; i < steps.size(); ++i) v.push_back(ms_of(*steps[i], c));
    medians.emplace_back(c, median(v));
    total += medians.back().second;
  }
  std::vector<double> step_ms, tokens;
  for (std::size_t i = first; i < steps.size(); ++i) {
    if (steps[i]->tokens_per_s > 0) step_ms.push_back(static_cast<double>(steps[i]->input_tokens) / steps[i]->tokens_per_s * 1e3);
    tokens.push_back(static_cast<double>(steps[i]->input_tokens));
  }
  const double step = median(step_ms), per_step_tokens = median(tokens);
  std::string h = "<h2>Where the step goes</h2>\n<p class=\"note\">logging.profile: median of " + std::to_string(steps.size() - first) +
                  " profiled steps" + (first ? " (the first left out)" : std::string()) + "; the sum of the medians is " +
                  fmt("%.1f", total) + " ms against a median step of " + fmt("%.1f", step) + " ms (" + fmt("%.3f", step > 0 ? total / step : 0.0) +
                  "). Each step's categories add up to its wall time (untracked is the rest).</p>\n";
  std::vector<std::pair<std::string, double>> largest = medians;
  std::stable_sort(largest.begin(), largest.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  h += "<table><tr><th>category</th><th>ms/step</th><th>share</th><th>us/token</th></tr>\n";
  for (const auto& [c, ms] : largest) {
    h += "<tr><td>" + html_escape(c) + "</td><td>" + fmt("%.1f", ms) + "</td><td>" + fmt("%.1f%%", total > 0 ? 100 * ms / total : 0.0) + "</td><td>" +
         fmt("%.2f", per_step_tokens > 0 ? ms * 1e3 / per_step_tokens : 0.0) + "</td></tr>\n";
  }
  h += "</table>\n";
  const std::size_t drawn = std::min<std::size_t>(largest.size(), 7);
  std::vector<Series> lines;
  for (std::size_t k = 0; k < drawn; ++k) {
    Points p;
    for (const auto* s : steps) p.emplace_back(static_cast<double>(s->step), ms_of(*s, largest[k].first));
    lines.push_back({largest[k].first, kColours[k % 8], downsample(p)});
  }
  if (largest.size() > drawn) {
    Points p;
    for (const auto* s : steps) {
      double rest = 0;
      for (std::size_t k = drawn; k < largest.size(); ++k) rest += ms_of(*s, largest[k].first);
      p.emplace_back(static_cast<double>(s->step), rest);
    }
    lines.push_back({"other (" + std::to_string(largest.size() - drawn) + " categories)", kColours[7], downsample(p), true});
  }
  PlotOptions o;
  o.title = "time per step by category";
  o.y_label = "ms";
  return h + "<div class=\"plots\">\n" + line_plot(lines, o) + "</div>\n";
}

std::string render_report(const RunData& run, const std::vector<RunData>& others) {
  std::vector<const RunData*> runs = {&run};
  for (const auto& o : others) runs.push_back(&o);
  const bool many = runs.size() > 1;
  std::vector<Series> loss, lr, grad, speed, memory;
  auto plot = [](std::string title, std::string y_label, bool log_toggle) {
    PlotOptions o;
    o.title = std::move(title);
    o.y_label = std::move(y_label);
    o.log_toggle = log_toggle;
    return o;
  };
  PlotOptions loss_o = plot("loss", "mean token loss", true), lr_o = plot("learning rate", "lr", true),
              grad_o = plot("gradient norm", "norm (before clipping)", true), speed_o = plot("throughput", "tokens/s", false),
              memory_o = plot("memory", "MB", false);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = *runs[i];
    const std::string c = kColours[i % 8];
    const std::string name = many ? label(r, i) + ": " : "";
    const Points raw = series_of(r, [](const StepRecord& s) { return s.loss; });
    loss.push_back({name + "train loss", c, downsample(raw), false, true});
    loss.push_back({name + "train loss (smoothed)", c, downsample(smoothed(raw))});
    Points eval;
    for (const auto& e : r.evals) eval.emplace_back(static_cast<double>(e.step), e.loss);
    if (!eval.empty()) loss.push_back({name + "eval loss", c, downsample(eval), true});
    lr.push_back({name + "lr", c, downsample(series_of(r, [](const StepRecord& s) { return s.lr; }))});
    grad.push_back({name + "grad norm", c, downsample(series_of(r, [](const StepRecord& s) { return s.grad_norm; }))});
    speed.push_back({name + "tokens/s", c, downsample(series_of(r, [](const StepRecord& s) { return s.tokens_per_s; }))});
    memory.push_back({name + "measured peak", c,
                      downsample(series_of(r, [](const StepRecord& s) { return static_cast<double>(s.peak_mem_bytes) / 1e6; }))});
    if (r.memory && r.memory->contains("peak_bytes")) {
      memory_o.y_lines.emplace_back((*r.memory)["peak_bytes"].get<double>() / 1e6, name + "predicted peak (ledger)");
    }
    for (const auto& s : r.steps)
      if (s.skipped) grad_o.markers.emplace_back(static_cast<double>(s.step), 0.0);
    if (i == 0) {
      for (auto step : r.resumes)
        for (auto* o : {&loss_o, &lr_o, &grad_o, &speed_o, &memory_o}) o->x_marks.push_back(static_cast<double>(step));
    }
  }
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ctune run report: " +
                  html_escape(fs::absolute(run.dir).string()) + "</title>\n<style>" + kStyle + "</style></head><body>\n";
  h += "<h1>ctune run report</h1>\n" + header(run);
  if (many) {
    h += "<p>Compared with:";
    for (std::size_t i = 1; i < runs.size(); ++i) {
      h += " <span style=\"color:" + std::string(kColours[i % 8]) + "\">" + html_escape(fs::absolute(runs[i]->dir).string()) + "</span>";
    }
    h += "</p>\n";
  }
  for (const auto* r : runs)
    for (const auto& p : r->problems) h += "<p class=\"problem\">" + html_escape(label(*r, 0) + ": " + p) + "</p>\n";
  h += "<h2>Curves</h2>\n<input type=\"checkbox\" id=\"logscale\"><label for=\"logscale\"> log scale (loss, lr, gradient norm)</label>\n";
  h += "<div class=\"plots\">\n" + line_plot(loss, loss_o) + line_plot(lr, lr_o) + line_plot(grad, grad_o) + line_plot(speed, speed_o) +
       line_plot(memory, memory_o) + "</div>\n";
  if (!run.resumes.empty()) h += "<p class=\"note\">Dashed vertical lines: steps the run was resumed from.</p>\n";
  h += experts_section(runs);
  h += preference_section(runs);
  h += rl_section(runs);
  h += distill_section(runs);
  h += profile_section(run);
  h += "<h2>Memory ledger</h2>\n" + ledger_table(run);
  h += "<h2>Recipe (resolved)</h2>\n<pre>" + html_escape(run.recipe_yaml.empty() ? "(no recipe.yaml)" : run.recipe_yaml) + "</pre>\n";
  return h + "</body></html>\n";
}

void write_report(const fs::path& run_dir, fs::path out, const std::vector<fs::path>& compare) {
  const RunData run = read_run(run_dir);
  std::vector<RunData> others;
  for (const auto& c : compare) others.push_back(read_run(c));
  if (out.empty()) out = run_dir / io::kReportFile;
  io::write_file_atomic(out, render_report(run, others));
}

}  // namespace ctune::report
