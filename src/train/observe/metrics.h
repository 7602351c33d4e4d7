// What a run reports: metrics.jsonl (one JSON object per optimizer step and per evaluation,
// flushed as written so a killed run keeps everything up to its last step), the same scalars as
// TensorBoard event files in tb/ (train/observe/tensorboard.h), and the progress line on stderr
// (rewritten in place on a terminal, plain lines otherwise).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <ATen/ATen.h>

#include "core/progress.h"
#include "train/observe/profiler.h"
#include "train/observe/tensorboard.h"

namespace ctune::train {

struct StepMetrics {
  std::int64_t step = 0;  // 1-based: optimizer steps done
  double loss = 0;        // mean token loss of the step
  double lr = 0;
  double grad_norm = 0;
  std::int64_t tokens = 0;  // target tokens in the step
  std::int64_t input_tokens = 0;  // positions the step's forwards ran over, targets or not
  double tokens_per_s = 0;  // input tokens (targets or not) per second of the step
  std::int64_t peak_mem_bytes = 0;
  double elapsed_s = 0;
  double cpu_s = 0;         // CPU time of the process so far (user + system, every thread)
  double sys_s = 0;         // of which in the kernel (page faults, thread wake-ups): the speed
                            // benchmark reports its share of the steps (scripts/bench.sh)
  bool skipped = false;     // non-finite loss or gradients: no update was applied
  double loss_scale = 0;    // fp16 loss scale used for the step (0: no loss scaling)
  StepProfile profile = {};  // logging.profile: seconds per category (empty when off)
  // A model with experts: the routers' load-balancing loss (its value, before moe.aux_loss_coef)
  // and per sparse layer the share of routed tokens each expert got (this rank's rows).
  std::optional<double> aux_loss = {};
  std::optional<double> z_loss = {};  // the routers' z-loss (before moe.router_z_loss_coef)
  std::vector<std::pair<std::int64_t, std::vector<double>>> expert_load = {};
  // The objective's own figures, each a mean over its units (DPO: "rewards/margins" per pair),
  // written under their names (metrics.jsonl, TensorBoard train/NAME).
  std::vector<std::pair<std::string, double>> objective = {};
};

struct EvalMetrics {
  std::int64_t step = 0;
  double eval_loss = 0;
  std::int64_t eval_tokens = 0;
  // The objective's figures on the eval split (metrics.jsonl eval_NAME, TensorBoard eval/NAME).
  std::vector<std::pair<std::string, double>> objective = {};
  bool token_loss = true;  // eval_loss is a token NLL (sft), so eval_ppl means something
};

class MetricsLog {
 public:
  // Appends to dir/metrics.jsonl (created when missing); with `tensorboard`, also writes a new
  // event file in dir/tb.
  explicit MetricsLog(const std::filesystem::path& dir, bool tensorboard = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const StepMetrics& m);
  void write(const EvalMetrics& m);
  void write_line(const std::string& json);

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::optional<EventWriter> events_;
};

// Keeps the lines of dir/metrics.jsonl and dir/samples.jsonl and the TensorBoard records in dir/tb whose step is <=
// step (rewritten atomically), so a resumed run appends where its checkpoint left off.
void truncate_metrics(const std::filesystem::path& dir, std::int64_t step);

// Training's progress line: on a terminal a live line (core/progress.h) redrawn as steps end;
// off it a plain line every log_every steps, as today's logs have it. train.log gets the plain
// line either way.
class Progress {
 public:
  Progress(std::int64_t first_step, std::int64_t total_steps, std::int64_t log_every);
  void step(const StepMetrics& m);
  // Ends an evaluation's stage with the eval line (printed off a terminal too).
  void eval(const EvalMetrics& m, Stage& stage);
  void finish();

 private:
  std::int64_t first_, total_, every_;
  Stage stage_;
  std::string body_, last_;  // the latest step line without and with its ETA
};

// CPU seconds this process has used so far: user + system, and system alone (getrusage).
struct CpuTimes {
  double total_s = 0;
  double system_s = 0;
};
CpuTimes process_cpu_times();

}  // namespace ctune::train
