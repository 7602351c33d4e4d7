// Tensor conversions for GGUF export and read-back. Conversions go through contiguous fp32 so
// the element encoders of io/gguf_types.h (torch-free, ggml's exact rounding) do the work.
#include "export/gguf_tensors.h"

#include <cstring>

#include "core/error.h"

namespace ctune::exporter {

namespace {

at::Tensor swap_halves(const at::Tensor& rows, std::int64_t heads, bool forward) {
  const auto n = rows.size(0);
  TORCH_CHECK(heads > 0 && n % (2 * heads) == 0, "Q/K permutation: ", n, " rows are not ", heads,
              " heads of an even head_dim");
  const auto half = n / heads / 2;
  std::vector<std::int64_t> view = {heads, forward ? 2 : half, forward ? half : 2};
  for (std::int64_t d = 1; d < rows.dim(); ++d) view.push_back(rows.size(d));
  return rows.reshape(view).transpose(1, 2).reshape(rows.sizes()).contiguous();
}

at::Tensor float_tensor(const std::vector<float>& values, const std::vector<std::int64_t>& shape) {
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  if (!values.empty()) std::memcpy(out.data_ptr<float>(), values.data(), values.size() * sizeof(float));
  return out;
}

}  // namespace

at::Tensor permute_qk_rows(const at::Tensor& rows, std::int64_t heads) {
  return swap_halves(rows, heads, true);
}

at::Tensor unpermute_qk_rows(const at::Tensor& rows, std::int64_t heads) {
  return swap_halves(rows, heads, false);
}

io::GgmlType storage_type(const at::Tensor& tensor, io::GgmlType requested) {
  if (tensor.dim() < 2) return io::GgmlType::F32;
  if (requested == io::GgmlType::Q8_0 && tensor.size(-1) % static_cast<std::int64_t>(io::kQ8BlockSize) != 0)
    return io::GgmlType::F16;
  return requested;
}

std::vector<std::int64_t> ggml_dims(const at::Tensor& tensor) {
  auto sizes = tensor.sizes().vec();
  return {sizes.rbegin(), sizes.rend()};
}

std::vector<std::uint8_t> encode_tensor(const at::Tensor& tensor, io::GgmlType type) {
  const at::Tensor values = tensor.detach().to(at::kCPU).to(at::kFloat).contiguous();
  return io::encode_ggml(type, values.data_ptr<float>(), static_cast<std::size_t>(values.numel()));
}

at::Tensor decode_tensor(const io::GgufFile& file, const io::GgufTensorInfo& info) {
  return float_tensor(file.read_floats(info), info.shape());
}

at::Tensor round_trip(const at::Tensor& tensor, io::GgmlType type) {
  const std::vector<std::uint8_t> bytes = encode_tensor(tensor, type);
  return float_tensor(io::decode_ggml(type, bytes.data(), static_cast<std::size_t>(tensor.numel()), "round trip"),
                      tensor.sizes().vec());
}

}  // namespace ctune::exporter
