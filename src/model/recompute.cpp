#include "model/recompute.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/error.h"
#include "model/llama.h"

namespace ctune::model {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

RecomputePolicy RecomputePolicy::parse(const std::string& text) {
  RecomputePolicy p;
  if (text == "none") return p;
  if (text == "full") {
    p.mode = Mode::full;
  } else if (text == "selective") {
    p.mode = Mode::selective;
  } else if (text.rfind("every_n:", 0) == 0) {
    p.mode = Mode::every_n;
    p.every = std::stoll(text.substr(8));
    if (p.every < 1) throw ConfigError("memory.activation_checkpointing: every_n:K needs K >= 1, found \"" + text + "\"");
  } else {
    throw ConfigError("memory.activation_checkpointing: expected none, full, selective or every_n:K, found \"" + text + "\"");
  }
  return p;
}

bool RecomputePolicy::recompute_block(std::int64_t layer) const {
  return mode == Mode::full || (mode == Mode::every_n && layer % every == 0);
}

namespace {

// The CPU generator's state, and a guard that swaps a saved state in and puts the current one
// back, so recomputation replays the forward's random draws without disturbing what follows.
at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

struct RngReplay {
  explicit RngReplay(const at::Tensor& state) : saved_(cpu_rng_state()) { set(state); }
  ~RngReplay() { set(saved_); }
  static void set(const at::Tensor& state) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
  at::Tensor saved_;
};

struct BlockFunction : public torch::autograd::Function<BlockFunction> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor cos, at::Tensor sin, at::Tensor mask,
                            DecoderLayerImpl* layer) {
    // The layer outlives the backward pass (it belongs to the model being trained).
    ctx->saved_data["layer"] = reinterpret_cast<std::int64_t>(layer);
    ctx->saved_data["rng"] = cpu_rng_state();
    ctx->save_for_backward({x, cos, sin, mask});
    at::NoGradGuard no_grad;
    return layer->forward_block(x, cos, sin, mask);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    auto saved = ctx->get_saved_variables();
    auto x = saved[0].detach().requires_grad_(true);
    {
      RngReplay replay(ctx->saved_data["rng"].toTensor());
      at::AutoGradMode enable(true);
      auto out = layer->forward_block(x, saved[1], saved[2], saved[3]);
      // Re-entrant backward through the recomputed block: parameter gradients accumulate in
      // place as in the plain graph; the input's gradient is returned to the outer graph.
      torch::autograd::backward({out}, {grad_out[0]});
    }
    return {x.grad(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpointed_block(DecoderLayerImpl& layer, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                              const at::Tensor& mask) {
  // The function's output must require grad for its backward to run even when x does not
  // (a frozen embedding under LoRA): an input leaf that requires grad guarantees that.
  auto input = x.requires_grad() ? x : x.detach().requires_grad_(true);
  return BlockFunction::apply(input, cos, sin, mask, &layer);
}

}  // namespace ctune::model
