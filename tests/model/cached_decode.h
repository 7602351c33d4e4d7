// Decoding with the KV cache against one full forward, for the families' tests (test_qwen3_5.cpp,
// test_gpt_oss.cpp). Header-only: it needs the model.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/decoder.h"

namespace ctune::test {

// ids [1, T]: the first `prefill` tokens in one step, then one token a step, each through the
// cache; returns max |cached - full| / max |full| over every position's logits.
inline double cached_decode_difference(model::CausalLM& lm, const at::Tensor& ids, std::int64_t prefill) {
  at::NoGradGuard no_grad;
  const auto T = ids.size(1);
  const auto full = lm->forward(ids);
  auto cache = lm->new_cache(T);
  model::ForwardInputs in;
  in.input_ids = ids.narrow(1, 0, prefill);
  in.cache = &cache;
  std::vector<at::Tensor> steps = {lm->logits(in)};
  for (std::int64_t t = prefill; t < T; ++t) {
    in.input_ids = ids.narrow(1, t, 1);
    steps.push_back(lm->logits(in));
  }
  if (cache.length() != T) return INFINITY;
  return (at::cat(steps, 1) - full).abs().max().item<double>() / full.abs().max().item<double>();
}

}  // namespace ctune::test
