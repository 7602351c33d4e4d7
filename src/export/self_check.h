// The check every export ends with: the file just written is read back with ctune's own GGUF
// reader, turned back into a model (permutation undone, weights dequantized to fp32, LoRA
// applied), and a probe is scored with it and with a reference. The largest per-token NLL
// difference must stay within kNllTolerance, else the export fails and the output path is left
// untouched.
//
// The reference is what the file is meant to encode:
//   f32              the source model itself (base + adapter): nothing is rounded, so only
//                    float reassociation differs (merge, rebuilt RoPE factors);
//   f16, bf16, q8_0  the source with every stored tensor sent through the same encode/decode
//                    round trip in memory. Rounding is intended, so it cannot be the error: the
//                    check proves the file holds exactly the rounded weights, under the right
//                    names, layout and metadata. How far rounding moved the model from the
//                    unrounded source is measured too and reported, as information (on tiny
//                    random test models q8_0 moves NLLs by ~0.3 nats; trained models far less).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "infer/score.h"
#include "io/gguf_types.h"
#include "io/gguf_writer.h"

namespace ctune::exporter {

// The exported file does not reproduce its source model.
class SelfCheckError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "self-check failed"; }
};

// max |NLL_reference - NLL_gguf| in nats over the probe (~100 tokens), unless the model's own
// float32 noise is larger (below).
inline constexpr double kNllTolerance = 1e-4;
// Where the reference and the file's model compute in a different order (an adapter unmerged in
// the reference, merged into the weights read back), their difference is one more sample of the
// model's float32 noise, which some models (Gated DeltaNet: measured 1.4e-4 to 2.8e-4 on the
// test models) have above kNllTolerance. A difference past kNllTolerance is then allowed up to
// kNoiseFactor times that noise, measured on the file's model (probe_fp32_noise): 8 as in the
// test suite (tests/support/margins.h, docs/testing.md), 100x to 1000x below what a wrong name,
// layout or reorder moves.
inline constexpr double kNoiseFactor = 8.0;

// The probe: a fixed English/code/number text through the tokenizer of `model_dir` (with its
// bos), or, when there is no usable tokenizer, fixed ids spread over the vocabulary.
std::vector<std::int64_t> probe_ids(const std::filesystem::path& model_dir, std::int64_t vocab_size);

struct ScoreDiff {
  double max_diff = 0;           // max |Δ NLL| over the probe positions (NaN when one is NaN)
  std::size_t positions = 0;     // NLL positions
  std::size_t argmax_agree = 0;  // of positions + 1: where both pick the same greedy token
};

struct CheckResult : ScoreDiff {
  double tolerance = 0;
  double noise = 0;  // the file's model's float32 noise, when the difference needed it (else 0)
  // Rounded exports (f16, bf16, q8_0): the exported file against the unrounded source. Reported,
  // never an error; absent for f32, where the check itself is against the source.
  std::optional<ScoreDiff> vs_source;
};

// Measures two scorings of the same probe against each other; never throws.
ScoreDiff diff_scores(const infer::ScoreResult& a, const infer::ScoreResult& b);

// Compares the exported file's scores with the reference's. Throws SelfCheckError past the
// tolerance (or when the lengths differ), naming `what`.
CheckResult compare_scores(const infer::ScoreResult& reference, const infer::ScoreResult& exported, double tolerance,
                           const std::string& what);

// The float32 noise of `lm`'s scores on `probe` (`scored`: its scores as it is): the RMS over two
// runs of max |dNLL| after every weight is moved one ulp up or down at random (tests/fp32_noise.py's
// idea); the weights are moved back after each run.
double probe_fp32_noise(model::CausalLM& lm, const std::vector<std::int64_t>& probe, const infer::ScoreResult& scored);

// The check of an export stored as `type`: for F32, `exported` against `source`; otherwise
// against `rounded_source()` (the source scored after the export's rounding was applied to it in
// memory), with the distance to `source` reported in vs_source. Past kNllTolerance, `noise()`
// (the file's model's float32 noise, probe_fp32_noise) sets the tolerance to kNoiseFactor times
// it when that is larger. `what` names the export.
CheckResult check_export(const infer::ScoreResult& source, const infer::ScoreResult& exported, io::GgmlType type,
                         const std::function<infer::ScoreResult()>& rounded_source, const std::function<double()>& noise,
                         const std::string& what);

// ConfigError when `out` is not a regular file or nothing, or exists and overwrite is false
// (io::refuse_unsafe_output_file), or exists and is not a GGUF file. Called before any work and
// again by write_checked.
void check_output_path(const std::filesystem::path& out, bool overwrite);

// Writes `writer` to a temporary file beside `out`, runs `check` on that file, and only when it
// passes renames it to `out` (fsyncing the directory). ConfigError when `out` exists and
// overwrite is false; on any failure the temporary file is removed and `out` is not touched.
// The writer (moved in) is dropped once the file is written, with the tensors its producers hold,
// so the check runs without them.
CheckResult write_checked(io::GgufWriter writer, const std::filesystem::path& out, bool overwrite,
                          const std::function<CheckResult(const std::filesystem::path&)>& check);

}  // namespace ctune::exporter
