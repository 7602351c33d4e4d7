// Reading what the reference scripts of tests/train write (make_train_reference.py,
// make_dpo_reference.py), shared by the training tests of one executable.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <string>

#include "core/json.h"
#include "model/decoder.h"
#include "train/step/loss.h"
#include "train/step/objective.h"

namespace ctune::test {

// Every tensor of a safetensors file, as fp32.
std::map<std::string, at::Tensor> read_tensors(const std::filesystem::path& path);

// One batch written as {"ids", "labels", "pos", "seg"}: lists of rows of integers.
train::TensorBatch batch_from_json(const Json& batch);

// The base model of `dir`/model with LoRA (r 4, alpha 8, every linear layer and the head) whose
// adapters are `dir`/lora.safetensors: the LoRA case of make_dpo_reference.py's models.
model::CausalLM lora_policy(const std::filesystem::path& dir);
// The policy and reference of an objective's case: "full": `dir`/policy trainable and `dir`/model
// frozen in eval mode; otherwise lora_policy(dir) and no reference (adapters off).
std::pair<model::CausalLM, model::CausalLM> policy_and_reference(const std::filesystem::path& dir, const std::string& kind);
// Copies every tensor of `weights` into the parameter of `lm` with its name, without gradients;
// returns how many found one.
std::size_t copy_into(model::CausalLM& lm, const std::map<std::string, at::Tensor>& weights);
// An objective's case against its reference (make_dpo_reference.py, make_grpo_reference.py):
// `loss` and the means of `terms`' metrics against `expected`, and every trainable gradient of
// `policy` (after the backward) against `dir`/grads_`name`.safetensors, each within
// noise_tolerance of its own float32 noise (`noise`); frozen parameters hold no gradient.
void expect_objective_matches(const std::filesystem::path& dir, const std::string& name, model::CausalLM& policy,
                              const train::Objective& objective, const train::ObjectiveTerms& terms, double units, double token_units,
                              double loss, const Json& expected, const Json& noise);
// ||a - b|| / ||b||, the relative error of a whole tensor (in float64).
double relative_error(const at::Tensor& a, const at::Tensor& b);

}  // namespace ctune::test
