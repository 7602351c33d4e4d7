// The bridge between safetensors bytes and at::Tensor: zero-copy views into mapped files when
// the stored dtype is the one asked for, conversions otherwise; and tensors -> TensorBytes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "io/safetensors.h"

namespace ctune::io {

// Throws UnsupportedError for dtypes this LibTorch cannot represent (e.g. F8 on 1.13, U16..U64).
at::ScalarType to_scalar_type(DType dtype, const std::string& where);
DType from_scalar_type(at::ScalarType type);

// A CPU tensor for `info` in `file`. Borrows the mapping (no copy) when the stored dtype equals
// `want` (or want is nullopt) and the bytes are aligned; otherwise converts into new memory.
at::Tensor load_tensor(const SafetensorsFile& file, const TensorInfo& info, std::optional<at::ScalarType> want);
// Whether load_tensor(file, info, want) returns a view of the mapping (true) or new memory.
bool borrows(const SafetensorsFile& file, const TensorInfo& info, at::ScalarType want);

// Describes contiguous CPU tensors for write_safetensors/write_checkpoint_tensors. The caller
// keeps `tensors` alive while the TensorBytes are used; non-contiguous inputs are made
// contiguous into `keep_alive`.
std::vector<TensorBytes> describe_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                          std::vector<at::Tensor>* keep_alive);

}  // namespace ctune::io
