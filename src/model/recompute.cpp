#include "model/recompute.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/error.h"
#include "ops/profile_regions.h"

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

// The block, kept with the autograd node until its backward has run (an opaque capsule: no
// type registration needed), and freed with the node.
struct BlockHolder : torch::CustomClassHolder {
  explicit BlockHolder(Block f) : fn(std::move(f)) {}
  Block fn;
};

struct BlockFunction : public torch::autograd::Function<BlockFunction> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, c10::intrusive_ptr<BlockHolder> block) {
    ctx->saved_data["block"] = c10::IValue::make_capsule(block);
    ctx->saved_data["rng"] = cpu_rng_state();
    ctx->save_for_backward({x});
    at::NoGradGuard no_grad;
    return block->fn(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto block = c10::static_intrusive_pointer_cast<BlockHolder>(ctx->saved_data["block"].toCapsule());
    auto saved = ctx->get_saved_variables();
    auto x = saved[0].detach().requires_grad_(true);
    {
      RngReplay replay(ctx->saved_data["rng"].toTensor());
      at::AutoGradMode enable(true);
      at::Tensor out;
      {
        RECORD_USER_SCOPE(ops::region::kRecompute);
        out = block->fn(x);
      }
      // Re-entrant backward through the recomputed block: parameter gradients accumulate in
      // place as in the plain graph; the input's gradient is returned to the outer graph.
      torch::autograd::backward({out}, {grad_out[0]});
    }
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpointed_block(Block block, const at::Tensor& x) {
  // The function's output must require grad for its backward to run even when x does not
  // (a frozen embedding under LoRA): an input leaf that requires grad guarantees that.
  auto input = x.requires_grad() ? x : x.detach().requires_grad_(true);
  return BlockFunction::apply(input, c10::make_intrusive<BlockHolder>(std::move(block)));
}

}  // namespace ctune::model
