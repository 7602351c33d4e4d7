#include "report/run_data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/method_names.h"
#include "core/quant_names.h"
#include "core/recipe.h"
#include "io/run_dir.h"

namespace ctune::report {
namespace fs = std::filesystem;

namespace {

double number(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// A run's files are read only when they are regular files, and line by line with a cap: a
// metrics.jsonl linked to /dev/zero or a FIFO must not make the report read forever.
constexpr std::size_t kMaxLine = 1 << 20;
constexpr std::uint64_t kMaxRecipeBytes = 1 << 20;

bool open_regular(const fs::path& path, std::ifstream& in, RunData& r, bool required) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    if (required) r.problems.push_back("no " + path.filename().string() + (path.filename() == io::kMetricsFile ? ": the run has not logged a step" : ""));
    return false;
  }
  if (!fs::is_regular_file(status)) {
    r.problems.push_back(path.filename().string() + " is not a regular file: left out");
    return false;
  }
  in.open(path, std::ios::binary);
  if (!in) r.problems.push_back(path.filename().string() + " cannot be opened: left out");
  return static_cast<bool>(in);
}

// The next line (without its newline), at most kMaxLine bytes kept; `cut` says whether it was
// longer. False at the end of the file. Reads the stream in blocks and finds newlines with
// memchr: a character at a time (istream::get) was a third of a 100 000-step report's own time.
class LineReader {
 public:
  explicit LineReader(std::istream& in) : in_(in) {}

  bool next(std::string& line, bool& cut) {
    line.clear();
    cut = false;
    bool any = false;
    for (;;) {
      if (at_ == size_ && !refill()) return any;
      any = true;
      const char* start = buffer_.data() + at_;
      const auto* nl = static_cast<const char*>(std::memchr(start, '\n', size_ - at_));
      const std::size_t n = nl ? static_cast<std::size_t>(nl - start) : size_ - at_;
      const std::size_t keep = std::min(n, kMaxLine - line.size());
      line.append(start, keep);
      cut = cut || keep < n;
      at_ += n;
      if (nl) {
        ++at_;
        return true;
      }
    }
  }

 private:
  bool refill() {
    in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    size_ = static_cast<std::size_t>(in_.gcount());
    at_ = 0;
    return size_ > 0;
  }

  std::istream& in_;
  std::array<char, 1 << 16> buffer_{};
  std::size_t at_ = 0, size_ = 0;
};

void read_metrics(RunData& r) {
  std::ifstream in;
  if (!open_regular(r.dir / io::kMetricsFile, in, r, true)) return;
  std::int64_t line_no = 0, bad = 0;
  std::string first_bad;
  bool cut = false;
  // A step's line is 150 bytes or more: room for every step at once, instead of growing the
  // vector (and faulting in its fresh pages) a doubling at a time.
  std::error_code ec;
  if (const auto bytes = fs::file_size(r.dir / io::kMetricsFile, ec); !ec) r.steps.reserve(std::min<std::uintmax_t>(bytes / 150, 1u << 22));
  LineReader lines(in);
  for (std::string line; lines.next(line, cut);) {
    ++line_no;
    if (line.empty() && !cut) continue;
    // One bad line is skipped and counted: the lines after it are still the run's.
    try {
      if (cut) throw FormatError("longer than " + std::to_string(kMaxLine) + " bytes");
      const Json j = parse_json(line, io::kMetricsFile);
      if (!j.is_object()) throw FormatError("not a JSON object");
      if (j.contains("memory")) {
        r.memory = j["memory"];
        continue;
      }
      if (!j.contains("step") || !j["step"].is_number_integer()) throw FormatError("no integer \"step\"");
      // An objective's figures: the keys with a '/' (DPO's rewards/..., logps/...; GRPO's
      // rewards/NAME/mean, completions/..., time/...), GRPO's plain ones and distill's on_policy.
      auto objective = [&](const std::string& prefix) {
        static const char* const kPlain[] = {"reward", "reward_std", "kl", "entropy", "frac_reward_zero_std", "on_policy"};
        std::map<std::string, double> out;
        for (const auto& [key, value] : j.items()) {
          const std::string name = key.substr(std::min(key.size(), prefix.size()));
          const bool plain = std::find(std::begin(kPlain), std::end(kPlain), name) != std::end(kPlain);
          if (key.rfind(prefix, 0) == 0 && (key.find('/') != std::string::npos || plain) && out.size() < 48)
            out[name] = value.is_number() ? value.get<double>() : std::nan("");
        }
        return out;
      };
      if (j.contains("eval_loss")) {
        r.evals.push_back({j["step"].get<std::int64_t>(), number(j, "time"), number(j, "eval_loss"), objective("eval_")});
        continue;
      }
      StepRecord s;
      s.step = j["step"].get<std::int64_t>();
      s.time = number(j, "time");
      s.loss = number(j, "loss");
      s.lr = number(j, "lr");
      s.grad_norm = number(j, "grad_norm");
      s.tokens_per_s = number(j, "tokens_per_s");
      s.elapsed_s = number(j, "elapsed_s");
      s.tokens = j.value("tokens", std::int64_t{0});
      s.input_tokens = j.value("input_tokens", std::int64_t{0});
      s.peak_mem_bytes = j.value("peak_mem_bytes", std::int64_t{0});
      s.skipped = j.value("skipped", false);
      s.aux_loss = number(j, "aux_loss");
      if (const auto it = j.find("expert_load"); it != j.end() && it->is_object()) {
        for (const auto& [layer, shares] : it->items()) {
          if (!shares.is_array() || layer.empty() || layer.size() > 9 || layer.find_first_not_of("0123456789") != std::string::npos) {
            throw FormatError("\"expert_load\" must map layer numbers to lists of shares");
          }
          std::vector<double> v;
          for (const auto& x : shares) v.push_back(x.is_number() ? x.get<double>() : std::nan(""));
          s.expert_load.emplace_back(std::stoll(layer), std::move(v));
        }
      }
      s.objective = objective("");
      if (const auto it = j.find("profile_ms"); it != j.end()) {
        if (!it->is_object()) throw FormatError("\"profile_ms\" must map categories to milliseconds");
        for (const auto& [category, ms] : it->items()) s.profile_ms.emplace_back(category, ms.is_number() ? ms.get<double>() : std::nan(""));
      }
      r.steps.push_back(std::move(s));
    } catch (const std::exception& e) {
      if (bad++ == 0) first_bad = "metrics.jsonl line " + std::to_string(line_no) + " is cut short or malformed (" + std::string(e.what()).substr(0, 160) + ")";
    }
  }
  if (bad > 0) r.problems.push_back(first_bad + ": left out" + (bad > 1 ? ", with " + std::to_string(bad - 1) + " more bad lines" : std::string()));
}

// samples.jsonl (grpo): its last line that parses, the latest step's groups.
void read_samples(RunData& r) {
  std::ifstream in;
  if (!open_regular(r.dir / io::kSamplesFile, in, r, false)) return;
  bool cut = false, bad = false;
  LineReader lines(in);
  for (std::string line; lines.next(line, cut);) {
    if (line.empty()) continue;
    try {
      if (cut) throw FormatError("too long");
      Json j = parse_json(line, io::kSamplesFile);
      if (!j.is_object() || !j.contains("groups") || !j["groups"].is_array()) throw FormatError("no \"groups\"");
      r.samples = std::move(j);
    } catch (const std::exception&) {
      bad = true;
    }
  }
  if (bad) r.problems.push_back("samples.jsonl has lines cut short or malformed: left out");
}

void read_recipe(RunData& r) {
  const fs::path path = r.dir / io::kRecipeFile;
  std::ifstream in;
  if (!open_regular(path, in, r, true)) return;
  std::error_code ec;
  if (fs::file_size(path, ec) > kMaxRecipeBytes) {
    r.problems.push_back("recipe.yaml is larger than " + std::to_string(kMaxRecipeBytes) + " bytes: left out");
    return;
  }
  r.recipe_yaml.assign(std::istreambuf_iterator<char>(in), {});
  try {
    const Recipe recipe = Recipe::parse(r.recipe_yaml, path.string());
    const auto text = [&](const char* key) { return recipe.get_optional_string(key).value_or(""); };
    r.model = text("model.path");
    const MethodNames* method = find_method(text("peft.method"));
    r.method = method ? method->title : text("peft.method");
    if (text("memory.quantize_base") != kQuantNone && !text("memory.quantize_base").empty()) r.method += " (" + text("memory.quantize_base") + " base)";
    r.precision = text("precision");
    r.train_data = text("data.train");
    r.eval_data = text("data.eval");  // null in a run without an eval split (the default)
    if (const auto steps = recipe.get_optional_int("training.max_steps")) r.max_steps = *steps;
  } catch (const std::exception& e) {
    r.problems.push_back(std::string("recipe.yaml cannot be read: ") + e.what());
  }
}

}  // namespace

RunData read_run(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(dir.string() + ": not a directory");
  if (!fs::exists(dir / io::kMetricsFile, ec) && !fs::exists(dir / io::kRecipeFile, ec)) {
    throw IoError(dir.string() + ": not a run directory (no metrics.jsonl, no recipe.yaml)");
  }
  RunData r;
  r.dir = dir;
  read_metrics(r);
  read_samples(r);
  read_recipe(r);
  for (const auto& resume : io::read_resume_records(dir)) r.resumes.push_back(resume.step);  // the run marker's records
  if (fs::is_directory(dir / io::kCheckpointsDir, ec)) {
    for (const auto& e : fs::directory_iterator(dir / io::kCheckpointsDir, ec))
      if (e.is_directory() && io::checkpoint_step(e.path()) >= 0) r.checkpoints.push_back(e.path().filename().string());
    std::sort(r.checkpoints.begin(), r.checkpoints.end());
  }
  // The result: whichever method's directory holds its weights' config.
  for (const auto& m : method_table())
    if (fs::exists(dir / m.result_dir / m.result_config, ec)) r.result = std::string(m.result_dir) + "/";
  const std::int64_t last = r.steps.empty() ? 0 : r.steps.back().step;
  if (!r.result.empty() && (r.max_steps == 0 || last >= r.max_steps)) {
    r.status = "finished";
  } else {
    r.status = io::is_locked(dir) ? "running" : "stopped";
  }
  return r;
}

}  // namespace ctune::report
