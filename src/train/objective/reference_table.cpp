#include "train/objective/reference_table.h"

#include <ATen/core/grad_mode.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/layers.h"
#include "train/objective/logps.h"

namespace ctune::train {

at::Tensor ReferenceTable::lookup(const TensorBatch& batch) const {
  const std::vector<double>& split = batch.eval_split ? eval : train;
  std::vector<double> out(static_cast<std::size_t>(batch.input_ids.size(0)), 0.0);
  for (std::size_t r = 0; r < batch.examples.size() && r < out.size(); ++r) {
    const std::int64_t e = batch.examples[r];
    if (e < 0) continue;
    if (static_cast<std::size_t>(e) >= split.size())
      throw FormatError("reference log-probabilities: example " + std::to_string(e) + " is outside the table's " +
                        std::to_string(split.size()));
    out[r] = split[static_cast<std::size_t>(e)];
  }
  return at::tensor(out, at::kDouble).to(batch.input_ids.device());
}

ReferenceTable compute_reference_table(model::CausalLM& policy, model::CausalLM reference, const std::vector<TensorBatch>& train,
                                       std::int64_t train_examples, const std::vector<TensorBatch>& eval, std::int64_t eval_examples,
                                       Stage* stage) {
  at::NoGradGuard no_grad;
  ReferenceTable table;
  table.train.assign(static_cast<std::size_t>(train_examples), 0.0);
  table.eval.assign(static_cast<std::size_t>(eval_examples), 0.0);
  std::int64_t done = 0;
  for (const auto* batches : {&train, &eval}) {
    for (const auto& batch : *batches) {
      const SequenceLogps ref = reference_logps(policy, reference, batch);
      const auto sums = ref.sum.to(at::kDouble).cpu();
      std::vector<double>& split = batch.eval_split ? table.eval : table.train;
      for (std::size_t r = 0; r < batch.examples.size(); ++r) {
        const std::int64_t e = batch.examples[r];
        if (e >= 0 && static_cast<std::size_t>(e) < split.size()) split[static_cast<std::size_t>(e)] = sums[static_cast<std::int64_t>(r)].item<double>();
      }
      if (stage) stage->update(++done);
    }
  }
  return table;
}

namespace {
std::string hex(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, v);
  return text;
}
}  // namespace

void write_reference_table(const std::filesystem::path& path, const ReferenceTable& table) {
  std::vector<io::TensorBytes> tensors = {
      {"train", io::DType::F64, {static_cast<std::int64_t>(table.train.size())}, table.train.data(), table.train.size() * sizeof(double)},
      {"eval", io::DType::F64, {static_cast<std::int64_t>(table.eval.size())}, table.eval.data(), table.eval.size() * sizeof(double)}};
  io::write_safetensors(path, std::move(tensors), {{"examples_fingerprint", hex(table.fingerprint)}});
}

std::optional<ReferenceTable> read_reference_table(const std::filesystem::path& path, std::uint64_t fingerprint,
                                                   std::int64_t train_examples, std::int64_t eval_examples) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const auto file = io::SafetensorsFile::open(path);
  const auto& meta = file->header().metadata;
  const auto it = meta.find("examples_fingerprint");
  if (it == meta.end() || it->second != hex(fingerprint))
    throw FormatError(path.string() + ": reference log-probabilities of other examples (fingerprint " +
                      (it == meta.end() ? std::string("missing") : it->second) + ", the run's " + hex(fingerprint) + ")");
  ReferenceTable table;
  table.fingerprint = fingerprint;
  for (auto [name, want, into] : {std::tuple<const char*, std::int64_t, std::vector<double>*>{"train", train_examples, &table.train},
                                  {"eval", eval_examples, &table.eval}}) {
    const auto* info = file->header().find(name);
    if (!info || info->dtype != io::DType::F64 || info->shape != std::vector<std::int64_t>{want})
      throw FormatError(path.string() + ": expected a float64 tensor \"" + std::string(name) + "\" of " + std::to_string(want) + " entries");
    into->resize(static_cast<std::size_t>(want));
    std::memcpy(into->data(), file->data(*info), static_cast<std::size_t>(want) * sizeof(double));
  }
  return table;
}

}  // namespace ctune::train
