// Probe, comparison and the check-then-rename step shared by both export formats.
#include "export/self_check.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "core/log.h"
#include "core/progress.h"
#include "io/file.h"
#include "io/run_dir.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::exporter {
namespace fs = std::filesystem;

namespace {

const char kProbeText[] =
    "The quick brown fox jumps over the lazy dog. In 2024, 17 of 32 tests passed (53.1%).\n"
    "def add(a, b):\n    return a + b  # sum\nHello, world! Bonjour le monde.";

}  // namespace

std::vector<std::int64_t> probe_ids(const fs::path& model_dir, std::int64_t vocab_size) {
  std::vector<std::int64_t> ids;
  try {
    auto tokenizer = tok::load_tokenizer(model_dir);
    for (auto id : tokenizer->encode(kProbeText, true)) ids.push_back(id);
  } catch (const Error& e) {
    spdlog::info("self-check probe: tokenizer unusable ({}); using fixed ids", e.what());
    ids.clear();
  }
  bool in_range = ids.size() >= 8;
  for (auto id : ids) in_range = in_range && id >= 0 && id < vocab_size;
  if (in_range) return ids;
  ids.clear();
  for (std::int64_t i = 0; i < 64; ++i) ids.push_back((i * 7919 + 13) % vocab_size);
  return ids;
}

ScoreDiff diff_scores(const infer::ScoreResult& a, const infer::ScoreResult& b) {
  ScoreDiff r;
  r.positions = a.nll.size();
  r.max_diff = infer::max_abs_difference(a.nll, b.nll);  // +inf for any non-finite score
  for (std::size_t i = 0; i < a.argmax.size() && i < b.argmax.size(); ++i) r.argmax_agree += a.argmax[i] == b.argmax[i];
  return r;
}

CheckResult compare_scores(const infer::ScoreResult& reference, const infer::ScoreResult& exported, double tolerance,
                           const std::string& what) {
  CheckResult r;
  static_cast<ScoreDiff&>(r) = diff_scores(reference, exported);
  r.tolerance = tolerance;
  if (reference.nll.size() != exported.nll.size() || !(r.max_diff <= tolerance)) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "max |dNLL| %.3g over %zu probe tokens exceeds the tolerance %.3g", r.max_diff,
                  r.positions, tolerance);
    throw SelfCheckError(what + ": " + buf + " (the file was not written)");
  }
  return r;
}

double probe_fp32_noise(model::CausalLM& lm, const std::vector<std::int64_t>& probe, const infer::ScoreResult& scored) {
  at::NoGradGuard no_grad;
  auto move = [&](std::uint64_t seed, double direction) {  // the same weights each way for one seed
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (auto& p : lm->parameters(true)) {
      if (!p.is_floating_point()) continue;
      const auto up = at::empty(p.sizes(), p.options().dtype(at::kFloat)).bernoulli_(0.5, gen).to(at::kBool);
      const auto inf = at::full({}, direction * INFINITY, p.options());
      p.copy_(at::nextafter(p, at::where(up, inf, -inf)));
    }
  };
  const int runs = 2;
  double squares = 0;
  for (int r = 0; r < runs; ++r) {
    move(1234 + r, 1.0);
    const double d = infer::max_abs_difference(infer::score_tokens(lm, probe, "self-check noise probe").nll, scored.nll);
    move(1234 + r, -1.0);
    squares += d * d;
  }
  return std::sqrt(squares / runs);
}

CheckResult check_export(const infer::ScoreResult& source, const infer::ScoreResult& exported, io::GgmlType type,
                         const std::function<infer::ScoreResult()>& rounded_source, const std::function<double()>& noise,
                         const std::string& what) {
  const bool f32 = type == io::GgmlType::F32;
  const infer::ScoreResult reference = f32 ? source : rounded_source();
  const std::string against = f32 ? what : what + " (against the source rounded in memory)";
  double tolerance = kNllTolerance, measured = 0;
  if (const double d = diff_scores(reference, exported).max_diff; d > kNllTolerance && std::isfinite(d) && noise) {
    measured = noise();
    tolerance = std::max(kNllTolerance, kNoiseFactor * measured);
    spdlog::info("self-check: max |dNLL| {:.3g} is past {:.3g}; the model's float32 noise on the probe is {:.3g}, so the "
                 "tolerance is {:.3g} ({}x it)", d, kNllTolerance, measured, tolerance, kNoiseFactor);
  }
  CheckResult r = compare_scores(reference, exported, tolerance, against);
  r.noise = measured;
  if (!f32) r.vs_source = diff_scores(source, exported);
  return r;
}

void check_output_path(const fs::path& out, bool overwrite) {
  io::refuse_unsafe_output_file(out, "--out", {}, overwrite);  // before the magic is read: a FIFO would block it
  std::error_code ec;
  if (fs::exists(out, ec)) {
    // --overwrite replaces an earlier export, never another kind of file (an input's weights).
    std::ifstream in(out, std::ios::binary);
    char magic[4] = {0};
    in.read(magic, 4);
    if (std::string(magic, 4) != "GGUF") {
      throw ConfigError(out.string() + ": exists and is not a GGUF file; --overwrite only replaces an earlier export");
    }
  }
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(parent, ec)) throw IoError(parent.string() + ": output directory does not exist");
}

CheckResult write_checked(io::GgufWriter writer, const fs::path& out, bool overwrite,
                          const std::function<CheckResult(const fs::path&)>& check) {
  check_output_path(out, overwrite);
  io::remove_stale_siblings(out);  // staged files of killed exports
  std::error_code ec;
  fs::path staged = out;
  staged += ".unchecked-" + io::unique_tag();  // fresh and unguessable: nothing planted there
  struct Remove {
    const fs::path& path;
    bool keep = false;
    ~Remove() {
      std::error_code e;
      if (!keep) fs::remove(path, e);
    }
  } cleanup{staged};
  {
    const io::GgufWriter written = std::move(writer);  // dropped with what its producers hold
    Stage stage("writing " + out.string(), static_cast<std::int64_t>(written.tensor_count()), "tensors");
    written.write(staged);
    stage.finish();
  }
  Stage checking("self-check of " + out.string());
  CheckResult result = check(staged);
  checking.finish();
  fs::rename(staged, out, ec);
  if (ec) throw IoError(out.string() + ": rename failed (" + ec.message() + ")");
  cleanup.keep = true;
  io::fsync_directory(out.parent_path().empty() ? fs::path(".") : out.parent_path());
  return result;
}

}  // namespace ctune::exporter
