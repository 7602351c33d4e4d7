#include "infer/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>

#include "core/error.h"

namespace ctune::infer {

std::vector<std::int64_t> generate(model::CausalLM& lm, const std::vector<std::int64_t>& prompt,
                                   const GenerateOptions& o) {
  if (prompt.empty()) throw ConfigError("generate: the prompt has no tokens");
  for (auto id : prompt) {
    if (id < 0 || id >= lm->config().vocab_size) {
      throw ConfigError("generate: prompt token " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  at::NoGradGuard no_grad;
  const bool was_training = lm->is_training();
  lm->eval();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  auto cache = lm->new_cache();
  const at::Device device = lm->parameters().front().device();  // the model's; sampling runs on the host
  std::vector<std::int64_t> history = prompt, out;
  model::ForwardInputs in;
  in.input_ids = at::tensor(prompt, at::kLong).view({1, -1}).to(device);
  in.cache = &cache;
  for (std::int64_t i = 0; i < o.max_new_tokens; ++i) {
    model::check_sequence_length(lm->config(), static_cast<std::int64_t>(history.size()), "generate");
    auto logits = lm->logits(in);  // [1, T, V]
    auto last = logits[0][logits.size(1) - 1].cpu();
    const auto next = choose_token(process_logits(last, history, o.sampling), o.sampling, gen);
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) break;
    out.push_back(next);
    history.push_back(next);
    in.input_ids = at::tensor(std::vector<std::int64_t>{next}, at::kLong).view({1, 1}).to(device);
  }
  if (was_training) lm->train();
  return out;
}

}  // namespace ctune::infer
