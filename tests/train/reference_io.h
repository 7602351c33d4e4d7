// Reading what the reference scripts of tests/train write (make_train_reference.py,
// make_dpo_reference.py), shared by the training tests of one executable.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <string>

#include "core/json.h"
#include "train/step/loss.h"

namespace ctune::test {

// Every tensor of a safetensors file, as fp32.
std::map<std::string, at::Tensor> read_tensors(const std::filesystem::path& path);

// One batch written as {"ids", "labels", "pos", "seg"}: lists of rows of integers.
train::TensorBatch batch_from_json(const Json& batch);

// ||a - b|| / ||b||, the relative error of a whole tensor (in float64).
double relative_error(const at::Tensor& a, const at::Tensor& b);

}  // namespace ctune::test
