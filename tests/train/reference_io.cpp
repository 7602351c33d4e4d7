#include "reference_io.h"

#include <algorithm>

#include "data/example.h"
#include "io/safetensors.h"
#include "io/tensor_io.h"

namespace ctune::test {

std::map<std::string, at::Tensor> read_tensors(const std::filesystem::path& path) {
  auto file = io::SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& t : file->header().tensors) out[t.name] = io::load_tensor(*file, t, at::kFloat).clone();
  return out;
}

train::TensorBatch batch_from_json(const Json& b) {
  auto t = [&](const char* key, at::ScalarType type) {
    auto rows = b[key].get<std::vector<std::vector<std::int64_t>>>();
    auto x = at::empty({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(rows[0].size())}, at::kLong);
    for (std::size_t r = 0; r < rows.size(); ++r) x[r] = at::tensor(rows[r], at::kLong);
    return x.to(type);
  };
  train::TensorBatch tb;
  tb.input_ids = t("ids", at::kLong);
  tb.labels = t("labels", at::kLong);
  tb.position_ids = t("pos", at::kLong);
  tb.segment_ids = t("seg", at::kInt);
  tb.target_tokens = (tb.labels.narrow(1, 1, tb.labels.size(1) - 1) != data::kIgnoreIndex).sum().item<std::int64_t>();
  return tb;
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double denom = b.to(at::kDouble).norm().item<double>();
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / std::max(denom, 1e-30);
}

}  // namespace ctune::test
