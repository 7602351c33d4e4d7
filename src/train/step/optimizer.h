// Optimizers over parameter groups: AdamW (decoupled weight decay, Loshchilov & Hutter) and SGD
// with momentum, with the update order of torch.optim so trajectories agree with PyTorch.
// The learning rate is passed to every step by the schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace ctune::train {

struct ParamGroup {
  std::vector<at::Tensor> params;
  double weight_decay = 0.0;
};

struct OptimizerOptions {
  std::string name = "adamw";  // adamw | sgd
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  double momentum = 0.9;                          // sgd
  bool decay_norms_and_biases = false;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update with learning rate `lr` to every parameter that has a gradient.
  virtual void step(double lr) = 0;
  void zero_grad();
  std::int64_t steps() const { return steps_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  // Optimizer state as named tensors ("adamw.exp_avg.3", numbered over the parameters of all
  // groups in order) and back, for checkpoints. A sharded optimizer gathers its state here: a
  // collective that every rank calls (train/parallel/zero.h).
  virtual std::vector<std::pair<std::string, at::Tensor>> state() const = 0;
  virtual void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) = 0;
  // Bytes of the state this rank holds (a sharded optimizer: its chunks'), without gathering.
  virtual std::int64_t state_bytes() const;

 protected:
  explicit Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}
  std::vector<ParamGroup> groups_;
  std::int64_t steps_ = 0;
};

// Splits named trainable parameters into a decayed group and, unless decay_norms_and_biases,
// a no-decay group of norm weights and biases (1-D tensors), as HF Trainer does.
std::vector<ParamGroup> make_param_groups(const std::vector<std::pair<std::string, at::Tensor>>& trainable,
                                          const OptimizerOptions& options);

std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const OptimizerOptions& options);

// The squared L2 norm of all gradients, summed in fp64.
double squared_grad_norm(const std::vector<ParamGroup>& groups);
// Scales gradients whose global L2 norm is `norm` so it is at most max_norm (when max_norm > 0),
// as torch.nn.utils.clip_grad_norm_.
void clip_gradients(const std::vector<ParamGroup>& groups, double max_norm, double norm);

}  // namespace ctune::train
