#include "report/run_data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "core/recipe.h"
#include "io/run_dir.h"

namespace ctune::report {
namespace fs = std::filesystem;

namespace {

double number(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

void read_metrics(RunData& r) {
  std::ifstream in(r.dir / "metrics.jsonl");
  if (!in) {
    r.problems.push_back("no metrics.jsonl: the run has not logged a step");
    return;
  }
  std::int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    Json j;
    try {
      j = parse_json(line, "metrics.jsonl");
    } catch (const FormatError&) {
      r.problems.push_back("metrics.jsonl line " + std::to_string(line_no) + " is cut short or malformed: it and what follows are left out");
      break;
    }
    if (!j.is_object()) continue;
    if (j.contains("memory")) {
      r.memory = j["memory"];
      continue;
    }
    if (!j.contains("step") || !j["step"].is_number_integer()) continue;
    if (j.contains("eval_loss")) {
      r.evals.push_back({j["step"].get<std::int64_t>(), number(j, "time"), number(j, "eval_loss")});
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
    s.peak_mem_bytes = j.value("peak_mem_bytes", std::int64_t{0});
    s.skipped = j.value("skipped", false);
    r.steps.push_back(s);
  }
}

void read_recipe(RunData& r) {
  const fs::path path = r.dir / "recipe.yaml";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    r.problems.push_back("no recipe.yaml");
    return;
  }
  r.recipe_yaml.assign(std::istreambuf_iterator<char>(in), {});
  try {
    const Recipe recipe = Recipe::parse(r.recipe_yaml, path.string());
    r.model = recipe.get_string("model.path");
    r.method = recipe.get_string("peft.method") == "lora" ? "LoRA" : "full fine-tuning";
    if (recipe.get_string("memory.quantize_base") != "none") r.method += " (" + recipe.get_string("memory.quantize_base") + " base)";
    r.precision = recipe.get_string("precision");
    r.train_data = recipe.get_string("data.train");
    r.eval_data = recipe.get_string("data.eval");
    if (const auto steps = recipe.get_optional_int("training.max_steps")) r.max_steps = *steps;
  } catch (const Error& e) {
    r.problems.push_back(std::string("recipe.yaml cannot be read: ") + e.what());
  }
}

// "resumed from <dir> at step N" lines of train.log.
void read_resumes(RunData& r) {
  std::ifstream in(r.dir / "train.log");
  static const std::regex resumed("resumed from .* at step ([0-9]+)");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, resumed)) r.resumes.push_back(std::stoll(m[1].str()));
}

}  // namespace

RunData read_run(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(dir.string() + ": not a directory");
  if (!fs::exists(dir / "metrics.jsonl", ec) && !fs::exists(dir / "recipe.yaml", ec)) {
    throw IoError(dir.string() + ": not a run directory (no metrics.jsonl, no recipe.yaml)");
  }
  RunData r;
  r.dir = dir;
  read_metrics(r);
  read_recipe(r);
  read_resumes(r);
  if (fs::is_directory(dir / "checkpoints", ec)) {
    for (const auto& e : fs::directory_iterator(dir / "checkpoints", ec))
      if (e.is_directory() && e.path().filename().string().rfind("step_", 0) == 0) r.checkpoints.push_back(e.path().filename().string());
    std::sort(r.checkpoints.begin(), r.checkpoints.end());
  }
  if (fs::exists(dir / "adapter" / "adapter_config.json", ec)) r.result = "adapter/";
  if (fs::exists(dir / "model" / "config.json", ec)) r.result = "model/";
  const std::int64_t last = r.steps.empty() ? 0 : r.steps.back().step;
  if (!r.result.empty() && (r.max_steps == 0 || last >= r.max_steps)) {
    r.status = "finished";
  } else {
    r.status = io::is_locked(dir) ? "running" : "stopped";
  }
  return r;
}

}  // namespace ctune::report
