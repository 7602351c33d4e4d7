#include "train/observe/metrics.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "io/file.h"
#include "io/run_layout.h"
#include "ops/device.h"

namespace ctune::train {

MetricsLog::MetricsLog(const std::filesystem::path& dir, bool tensorboard) : path_(dir / io::kMetricsFile) {
  file_ = io::open_for_append(path_);
  if (tensorboard) events_.emplace(dir / io::kEventsDir);
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write_line(const std::string& json) {
  if (std::fputs((json + "\n").c_str(), file_) < 0 || std::fflush(file_) != 0) {
    throw IoError(path_.string() + ": write failed (disk full?)");
  }
}

namespace {
// JSON has no NaN/Inf: non-finite values are written as null.
nlohmann::ordered_json num(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); }

// The finite values among `all` (a skipped step's loss is not a point of the curve).
std::vector<std::pair<std::string, double>> finite(std::vector<std::pair<std::string, double>> all) {
  all.erase(std::remove_if(all.begin(), all.end(), [](const auto& kv) { return !std::isfinite(kv.second); }), all.end());
  return all;
}
}  // namespace

void MetricsLog::write(const StepMetrics& m) {
  const double time = unix_seconds();  // the record's "time" and its TensorBoard wall_time
  nlohmann::ordered_json j = {{"step", m.step},           {"time", time},                 {"loss", num(m.loss)},
                              {"lr", m.lr},               {"grad_norm", num(m.grad_norm)},
                              {"tokens", m.tokens},       {"input_tokens", m.input_tokens},
                              {"tokens_per_s", num(m.tokens_per_s)},
                              {"peak_mem_bytes", m.peak_mem_bytes}, {"elapsed_s", m.elapsed_s},
                              {"cpu_s", m.cpu_s},         {"sys_s", m.sys_s}};
  if (m.loss_scale > 0) j["loss_scale"] = m.loss_scale;
  if (m.skipped) j["skipped"] = true;
  if (m.aux_loss) j["aux_loss"] = num(*m.aux_loss);
  if (m.z_loss) j["z_loss"] = num(*m.z_loss);
  if (!m.expert_load.empty()) {
    nlohmann::ordered_json load;
    for (const auto& [layer, shares] : m.expert_load) load[std::to_string(layer)] = shares;
    j["expert_load"] = std::move(load);
  }
  if (!m.profile.empty()) {
    nlohmann::ordered_json p;
    for (const auto& [category, seconds] : m.profile.seconds) p[category] = seconds * 1e3;
    j["profile_ms"] = std::move(p);
    // This process's GEMMs (with several ranks: rank 0's share of the step).
    j["gemm_gflop"] = m.profile.gemm_flops * 1e-9;
    j["projection_gemm_gflop"] = m.profile.projection_gemm_flops * 1e-9;
  }
  for (const auto& [name, value] : m.objective) j[name] = num(value);
  write_line(j.dump());
  if (events_) {
    auto scalars = finite({{"train/loss", m.loss}, {"train/lr", m.lr}, {"train/grad_norm", m.grad_norm},
                           {"train/tokens_per_s", m.tokens_per_s}, {"train/peak_mem_bytes", static_cast<double>(m.peak_mem_bytes)}});
    if (m.aux_loss && std::isfinite(*m.aux_loss)) scalars.emplace_back("train/aux_loss", *m.aux_loss);
    if (m.z_loss && std::isfinite(*m.z_loss)) scalars.emplace_back("train/z_loss", *m.z_loss);
    for (const auto& [name, value] : m.objective)
      if (std::isfinite(value)) scalars.emplace_back("train/" + name, value);
    // Per layer, the busiest expert's share (1/E when balanced, 1 when one expert takes all).
    for (const auto& [layer, shares] : m.expert_load)
      if (!shares.empty()) scalars.emplace_back("moe/max_expert_load/layer_" + std::to_string(layer), *std::max_element(shares.begin(), shares.end()));
    events_->scalars(m.step, time, scalars);
  }
}

void MetricsLog::write(const EvalMetrics& m) {
  // Perplexity: exp of the mean token NLL (what `ctune eval` prints too).
  const double time = unix_seconds();  // the record's "time" and its TensorBoard wall_time
  nlohmann::ordered_json j = {{"step", m.step}, {"time", time}, {"eval_loss", num(m.eval_loss)}};
  if (m.token_loss) j["eval_ppl"] = num(std::exp(m.eval_loss));
  j["eval_tokens"] = m.eval_tokens;
  for (const auto& [name, value] : m.objective) j["eval_" + name] = num(value);
  write_line(j.dump());
  if (events_) {
    std::vector<std::pair<std::string, double>> scalars = {{"eval/loss", m.eval_loss}};
    if (m.token_loss) scalars.emplace_back("eval/ppl", std::exp(m.eval_loss));
    for (const auto& [name, value] : m.objective) scalars.emplace_back("eval/" + name, value);
    events_->scalars(m.step, time, finite(scalars));
  }
}

Progress::Progress(std::int64_t first_step, std::int64_t total_steps, std::int64_t log_every)
    : first_(first_step), total_(total_steps), every_(std::max<std::int64_t>(1, log_every)), stage_("train", total_steps, "steps", false) {
  stage_.resume_at(first_step);
}

void Progress::step(const StepMetrics& m) {
  // The ETA from this session's steps: a resumed run's earlier ones took another process's time.
  const std::int64_t run = m.step - first_;
  const double eta = run > 0 ? m.elapsed_s / static_cast<double>(run) * static_cast<double>(total_ - m.step) : 0;
  // Most wanted first (loss, ETA, speed, memory): a narrow terminal cuts the live line's end.
  char head[96], tail[224];
  std::snprintf(head, sizeof(head), "step %lld/%lld  loss %.4f", static_cast<long long>(m.step), static_cast<long long>(total_), m.loss);
  std::snprintf(tail, sizeof(tail), "%.0f tok/s  mem %s  lr %.3g  grad %.3g", m.tokens_per_s,
                format_bytes(m.peak_mem_bytes).c_str(), m.lr, m.grad_norm);
  body_ = std::string(head) + "  " + tail;
  last_ = std::string(head) + "  eta " + format_duration(eta) + "  " + tail;
  stage_.show(m.step, [&] { return last_; });
  if (m.step % every_ != 0 && m.step != total_) return;
  if (!stage_.live()) print_line(last_);
  if (auto log = spdlog::get("train")) log->info("{}", last_);
}

void Progress::eval(const EvalMetrics& m, Stage& stage) {
  char line[256];
  if (m.token_loss) {
    std::snprintf(line, sizeof(line), "eval at step %lld: loss %.4f, perplexity %.3f over %lld tokens", static_cast<long long>(m.step),
                  m.eval_loss, std::exp(m.eval_loss), static_cast<long long>(m.eval_tokens));
  } else {
    std::snprintf(line, sizeof(line), "eval at step %lld: loss %.4f", static_cast<long long>(m.step), m.eval_loss);
  }
  std::string text = line;
  for (const auto& [name, value] : m.objective) text += fmt::format(", {} {:.4f}", name, value);
  stage.finish(text, /*plain=*/true);
  if (auto log = spdlog::get("train")) log->info("eval step {} loss {:.6f} tokens {}", m.step, m.eval_loss, m.eval_tokens);
}

// The final line: the last step's, with the time the session took in place of the ETA.
void Progress::finish() { stage_.finish(body_.empty() ? std::string() : body_ + "  in " + format_duration(stage_.seconds())); }

CpuTimes process_cpu_times() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return {seconds(usage.ru_utime) + seconds(usage.ru_stime), seconds(usage.ru_stime)};
}


namespace {
// Keeps the records of `path` (JSON lines with a "step") up to `step`.
void truncate_jsonl(const std::filesystem::path& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = parse_json(line, path.string());
    } catch (const FormatError&) {
      break;  // a line cut short by the kill (or tampered with): nothing after it can be trusted
    }
    if (!j.contains("step") || j["step"].get<std::int64_t>() > step) continue;
    kept += line + "\n";
  }
  io::write_file_atomic(path, kept);
}
}  // namespace

void truncate_metrics(const std::filesystem::path& dir, std::int64_t step) {
  truncate_events(dir / io::kEventsDir, step);
  truncate_jsonl(dir / io::kMetricsFile, step);
  truncate_jsonl(dir / io::kSamplesFile, step);
}

}  // namespace ctune::train
