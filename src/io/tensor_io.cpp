#include "io/tensor_io.h"

#include <cstring>

#include <torch/version.h>

#include "core/error.h"

namespace ctune::io {

at::ScalarType to_scalar_type(DType dtype, const std::string& where) {
  switch (dtype) {
    case DType::BOOL: return at::kBool;
    case DType::U8: return at::kByte;
    case DType::I8: return at::kChar;
    case DType::I16: return at::kShort;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I32: return at::kInt;
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    case DType::I64: return at::kLong;
    default:
      throw UnsupportedError(where + ": dtype " + dtype_name(dtype) + " has no LibTorch " TORCH_VERSION
                             " equivalent");
  }
}

DType from_scalar_type(at::ScalarType type) {
  switch (type) {
    case at::kBool: return DType::BOOL;
    case at::kByte: return DType::U8;
    case at::kChar: return DType::I8;
    case at::kShort: return DType::I16;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kInt: return DType::I32;
    case at::kFloat: return DType::F32;
    case at::kDouble: return DType::F64;
    case at::kLong: return DType::I64;
    default: throw UnsupportedError(std::string("tensor dtype ") + c10::toString(type) + " cannot be stored in safetensors");
  }
}

namespace {
// Whether the tensor's bytes in the mapping are aligned to its element size (readable in place).
bool aligned(const SafetensorsFile& file, const TensorInfo& info) {
  return reinterpret_cast<std::uintptr_t>(file.data(info)) % dtype_size(info.dtype) == 0 || info.nbytes() == 0;
}
}  // namespace

bool borrows(const SafetensorsFile& file, const TensorInfo& info, at::ScalarType want) {
  return aligned(file, info) && to_scalar_type(info.dtype, file.path().string() + ": tensor \"" + info.name + "\"") == want;
}

at::Tensor load_tensor(const SafetensorsFile& file, const TensorInfo& info, std::optional<at::ScalarType> want) {
  const std::string where = file.path().string() + ": tensor \"" + info.name + "\"";
  const at::ScalarType stored = to_scalar_type(info.dtype, where);
  std::uint8_t* bytes = file.data(info);
  at::Tensor view;
  if (aligned(file, info)) {
    // The deleter owns a reference to the mapping, so the tensor keeps the file mapped.
    auto mapping = file.mapping();
    view = at::from_blob(bytes, info.shape, [mapping](void*) {}, at::TensorOptions().dtype(stored));
  } else {
    // Writers other than the reference may not align tensors: copy to aligned memory.
    view = at::empty(info.shape, at::TensorOptions().dtype(stored));
    std::memcpy(view.data_ptr(), bytes, info.nbytes());
  }
  if (want && *want != stored) return view.to(*want);
  return view;
}

std::vector<TensorBytes> describe_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                          std::vector<at::Tensor>* keep_alive) {
  std::vector<TensorBytes> out;
  out.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    at::Tensor t = tensor.detach();
    if (!t.device().is_cpu()) t = t.cpu();
    if (!t.is_contiguous()) t = t.contiguous();
    keep_alive->push_back(t);
    TensorBytes b;
    b.name = name;
    b.dtype = from_scalar_type(t.scalar_type());
    b.shape = t.sizes().vec();
    b.data = t.data_ptr();
    b.nbytes = t.numel() * t.element_size();
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace ctune::io
