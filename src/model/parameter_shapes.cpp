#include "model/parameter_shapes.h"

#include "model/decoder.h"

namespace ctune::model {

std::int64_t ParameterShape::numel() const {
  std::int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

std::string ParameterShape::module() const {
  const auto last = name.rfind('.');
  if (last == std::string::npos) return name;
  const auto before = name.rfind('.', last - 1);
  return name.substr(before == std::string::npos ? 0 : before + 1, last - (before == std::string::npos ? 0 : before + 1));
}

std::int64_t ParameterShape::layer() const {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  const auto end = name.find('.', prefix.size());
  return std::stoll(name.substr(prefix.size(), end - prefix.size()));
}

bool ParameterShape::is_weight() const {
  const auto last = name.rfind('.');
  return name.compare(last == std::string::npos ? 0 : last + 1, std::string::npos, "weight") == 0;
}

std::vector<ParameterShape> parameter_shapes(const torch::nn::Module& model) {
  std::vector<ParameterShape> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const auto sizes = item.value().sizes();
    out.push_back({item.key(), std::vector<std::int64_t>(sizes.begin(), sizes.end())});
  }
  return out;
}

std::vector<ParameterShape> parameter_shapes(const ModelConfig& config) {
  const CausalLM shape_only(config, at::kBFloat16);
  return parameter_shapes(*shape_only);
}

std::int64_t parameter_count(const std::vector<ParameterShape>& shapes) {
  std::int64_t n = 0;
  for (const auto& s : shapes) n += s.numel();
  return n;
}

}  // namespace ctune::model
