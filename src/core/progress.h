// Live progress on a terminal. Each long stage of a command (reading and tokenising a dataset,
// loading weights, training, evaluating, writing a checkpoint, merging, exporting) is a Stage:
// while it runs it owns one line at the bottom of stderr, redrawn in place at most ten times a
// second, and when it ends that line is kept with its final state. Only the innermost open stage
// is drawn (an eval inside training takes the line, and training's returns below it). Log lines
// printed meanwhile appear above the live line: the logger (core/log.cpp) writes through
// print_above.
//
// When stderr is not a terminal (a pipe, a file, a rank under the launcher) stages draw nothing:
// the plain log lines are what a log file wants. The one exception is a heartbeat, one plain
// line every 30 s (CTUNE_HEARTBEAT_SECONDS) for a stage that runs that long, so a tokenisation
// of many minutes is not silent. Stages show only at log level info or below (not with --log-level warn, not on the
// ranks other than 0, which log warnings only). See docs/progress.md.
//
//   Stage stage("writing " + path, n_tensors, "tensors");
//   for (...) { write(t); stage.advance(1, t.nbytes); }
//   stage.finish();  // "writing out/model.safetensors  24/24 tensors  540 MB  in 1.2 s"
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace ctune {

class Stage {
 public:
  // `label` names the stage ("data/train.jsonl", "eval at step 50"); `total` counts its units
  // (0: not known), `unit` names them ("steps", "batches", "tensors"; "bytes" are shown as
  // sizes). Without `heartbeat`, the stage prints nothing at all off a terminal (training,
  // whose caller prints its own plain lines).
  explicit Stage(std::string label, std::int64_t total = 0, std::string unit = "", bool heartbeat = true);
  ~Stage();  // an unfinished stage (an error on its way out) keeps its last line as it was
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  // Where the stage stands: `done` units and `bytes` handled so far (bytes 0: not shown).
  // `detail` (called only when the line is redrawn) adds what the counts do not say, e.g. the
  // running loss.
  void update(std::int64_t done, std::uint64_t bytes = 0, const std::function<std::string()>& detail = {});
  void advance(std::int64_t units = 1, std::uint64_t bytes = 0);
  // A caller that formats its whole line (training): `done` units, shown as `line` instead of
  // the counts.
  void show(std::int64_t done, const std::function<std::string()>& line);
  // Counts before this session's work (a resumed run's steps): not used for the rate or ETA.
  void resume_at(std::int64_t done);

  // Ends the stage. On a terminal its line is redrawn a last time and kept: `summary`, or else
  // the counts with the time taken. With `plain`, the summary is printed off a terminal too (a
  // line logs have always had, like "eval at step 50: ...").
  void finish(const std::string& summary = {}, bool plain = false);

  double seconds() const;
  bool live() const { return live_; }
  std::int64_t done() const { return done_; }
  std::uint64_t bytes() const { return bytes_; }
  const std::string& unit() const { return unit_; }

 private:
  friend struct Terminal;
  std::string counts_text(bool final) const;  // what follows the label
  bool due(std::chrono::steady_clock::time_point now) const;
  void redraw(std::string head, std::string tail);

  std::string label_, unit_;
  std::int64_t total_ = 0, done_ = 0, first_done_ = 0;
  std::uint64_t bytes_ = 0;
  bool live_ = false;       // drawn on a terminal (stderr is one, log level info)
  bool plain_ = false;      // off a terminal at log level info: finish(plain) and heartbeats print
  bool heartbeat_ = true;
  bool open_ = true;        // not finished
  std::string head_, tail_;  // the live line as last drawn: label (shortened first) and the rest
  std::chrono::steady_clock::time_point start_, last_draw_, last_beat_;
};

// Reads the progress settings of the environment (CTUNE_HEARTBEAT_SECONDS) once, at start-up:
// ConfigError for a bad value, before any work. init_logging calls it.
void check_progress_settings();

// One tensor of `bytes` written: counted into the innermost open stage whose unit is "tensors"
// (nothing when there is none). The file writers (safetensors, GGUF) call it, so every stage
// that writes tensors shows them without a callback through each layer between.
void count_tensor_written(std::uint64_t bytes);

// Runs `write` (which prints whole lines to stderr) with the live line taken off the screen
// first and redrawn after, so the two never mix. print_line writes one line that way.
void print_above(const std::function<void()>& write);
void print_line(const std::string& line);

// "540 MB", "1.2 GB", "812 kB" (powers of 1000, as the logs write sizes); a negative count (a
// difference of sizes) as "0 B".
std::string format_bytes(std::int64_t bytes);
// "4.2 s", "3m07s", "3h05m"; "?" for a negative or non-finite number.
std::string format_duration(double seconds);

}  // namespace ctune
