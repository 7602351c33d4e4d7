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

// tile_heads on the slice it names, forward (grouped -> tiled) or back.
at::Tensor tile_heads(const at::Tensor& t, const model::GgufChange& c, bool forward) {
  const std::int64_t n = c.groups * c.per_group * c.width;
  TORCH_CHECK(c.dim >= 0 && c.dim < t.dim() && c.offset >= 0 && c.offset + n == t.size(c.dim), "tile_heads of ", c.param,
              ": ", c.groups, " x ", c.per_group, " x ", c.width, " from ", c.offset, " does not end dimension ", c.dim,
              " of ", t.sizes());
  std::vector<std::int64_t> view = t.sizes().vec();
  view[static_cast<std::size_t>(c.dim)] = forward ? c.groups : c.per_group;
  view.insert(view.begin() + c.dim + 1, {forward ? c.per_group : c.groups, c.width});
  const at::Tensor part = t.narrow(c.dim, c.offset, n).reshape(view).transpose(c.dim, c.dim + 1);
  std::vector<std::int64_t> flat = t.sizes().vec();
  flat[static_cast<std::size_t>(c.dim)] = n;
  return at::cat({t.narrow(c.dim, 0, c.offset), part.reshape(flat)}, c.dim);
}

at::Tensor change(const at::Tensor& t, const model::GgufChange& c, bool forward) {
  using Kind = model::GgufChange::Kind;
  switch (c.kind) {
    case Kind::negative_exp: return forward ? -t.exp() : (-t).log();
    case Kind::drop_dim1: return forward ? t.squeeze(1) : t.unsqueeze(1);
    case Kind::tile_heads: return tile_heads(t, c, forward);
  }
  return t;
}

}  // namespace

at::Tensor apply_changes(const at::Tensor& tensor, const std::vector<model::GgufChange>& changes) {
  at::Tensor t = tensor;
  for (const auto& c : changes) t = change(t, c, true);
  return changes.empty() ? t : t.contiguous();
}

at::Tensor undo_changes(const at::Tensor& tensor, const std::vector<model::GgufChange>& changes) {
  at::Tensor t = tensor;
  for (auto it = changes.rbegin(); it != changes.rend(); ++it) t = change(t, *it, false);
  return changes.empty() ? t : t.contiguous();
}

LoraChanges lora_changes(const std::vector<model::GgufChange>& weight_changes, const std::string& weight) {
  LoraChanges out;
  for (const auto& c : weight_changes) {
    if (c.kind != model::GgufChange::Kind::tile_heads || c.dim > 1)
      throw UnsupportedError(weight + ": a LoRA adapter of a weight whose values GGUF changes has no GGUF LoRA form");
    (c.dim == 0 ? out.b : out.a).push_back(c);
  }
  return out;
}

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
