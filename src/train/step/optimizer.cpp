#include "train/step/optimizer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <cmath>

#include "core/error.h"
#include "ops/fused_optimizer.h"
#include "ops/profile_regions.h"

namespace ctune::train {

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [name, t] : state()) bytes += static_cast<std::int64_t>(t.nbytes());
  return bytes;
}

namespace {

// AdamW exactly as torch.optim.AdamW (single-tensor path): decay first, then the moments,
// then the bias-corrected step.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const OptimizerOptions& o)
      : Optimizer(std::move(groups)), beta1_(o.beta1), beta2_(o.beta2), eps_(o.eps) {
    for (const auto& g : groups_)
      for (const auto& p : g.params) {
        exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
        exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
      }
  }

  void step(double lr) override {
    RECORD_USER_SCOPE(ops::region::kOptimizer);
    at::NoGradGuard no_grad;
    ++steps_;
    const double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
    const double bias2_sqrt = std::sqrt(1.0 - std::pow(beta2_, static_cast<double>(steps_)));
    const double step_size = lr / bias1;
    std::size_t i = 0;
    for (auto& g : groups_) {
      for (auto& p : g.params) {
        auto& m = exp_avg_[i];
        auto& v = exp_avg_sq_[i];
        ++i;
        if (!p.grad().defined()) continue;
        const auto& grad = p.grad();
        // One pass per parameter (ops/fused_optimizer.h) where the kernel covers it.
        if (ops::adamw_step(p, grad, m, v, {lr, g.weight_decay, beta1_, beta2_, eps_, steps_})) continue;
        if (g.weight_decay != 0) p.mul_(1.0 - lr * g.weight_decay);
        m.lerp_(grad, 1.0 - beta1_);
        v.mul_(beta2_).addcmul_(grad, grad, 1.0 - beta2_);
        auto denom = (v.sqrt() / bias2_sqrt).add_(eps_);
        p.addcdiv_(m, denom, -step_size);
      }
    }
  }

  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    out.emplace_back("adamw.step", at::tensor(steps_, at::kLong));
    for (std::size_t i = 0; i < exp_avg_.size(); ++i) {
      out.emplace_back("adamw.exp_avg." + std::to_string(i), exp_avg_[i]);
      out.emplace_back("adamw.exp_avg_sq." + std::to_string(i), exp_avg_sq_[i]);
    }
    return out;
  }

  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) override {
    at::NoGradGuard no_grad;
    std::size_t found = 0;
    for (const auto& [name, t] : state) {
      if (name == "adamw.step") {
        steps_ = t.item<std::int64_t>();
        ++found;
        continue;
      }
      const bool sq = name.rfind("adamw.exp_avg_sq.", 0) == 0;
      const std::string prefix = sq ? "adamw.exp_avg_sq." : "adamw.exp_avg.";
      if (name.rfind(prefix, 0) != 0) throw FormatError("optimizer state: unexpected entry \"" + name + "\" for adamw");
      const auto i = std::stoul(name.substr(prefix.size()));
      auto& dst = sq ? exp_avg_sq_ : exp_avg_;
      if (i >= dst.size() || !dst[i].sizes().equals(t.sizes())) {
        throw ShapeError("optimizer state: \"" + name + "\" does not match the trainable parameters");
      }
      dst[i].copy_(t);
      ++found;
    }
    if (found != 1 + 2 * exp_avg_.size()) {
      throw FormatError("optimizer state: expected " + std::to_string(1 + 2 * exp_avg_.size()) + " adamw entries, found " +
                        std::to_string(found));
    }
  }

 private:
  double beta1_, beta2_, eps_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
};

// SGD with momentum as torch.optim.SGD (dampening 0, no nesterov): weight decay is added to
// the gradient (coupled), the first step seeds the momentum buffer with the gradient.
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<ParamGroup> groups, const OptimizerOptions& o) : Optimizer(std::move(groups)), momentum_(o.momentum) {
    for (const auto& g : groups_)
      for (std::size_t j = 0; j < g.params.size(); ++j) buffers_.emplace_back();
  }

  void step(double lr) override {
    RECORD_USER_SCOPE(ops::region::kOptimizer);
    at::NoGradGuard no_grad;
    ++steps_;
    std::size_t i = 0;
    for (auto& g : groups_) {
      for (auto& p : g.params) {
        auto& buf = buffers_[i++];
        if (!p.grad().defined()) continue;
        auto d = g.weight_decay != 0 ? p.grad().add(p, g.weight_decay) : p.grad();
        if (momentum_ != 0) {
          if (!buf.defined()) {
            buf = d.clone();
          } else {
            buf.mul_(momentum_).add_(d);
          }
          d = buf;
        }
        p.add_(d, -lr);
      }
    }
  }

  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    out.emplace_back("sgd.step", at::tensor(steps_, at::kLong));
    for (std::size_t i = 0; i < buffers_.size(); ++i)
      if (buffers_[i].defined()) out.emplace_back("sgd.momentum." + std::to_string(i), buffers_[i]);
    return out;
  }

  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) override {
    for (const auto& [name, t] : state) {
      if (name == "sgd.step") {
        steps_ = t.item<std::int64_t>();
        continue;
      }
      const std::string prefix = "sgd.momentum.";
      if (name.rfind(prefix, 0) != 0) throw FormatError("optimizer state: unexpected entry \"" + name + "\" for sgd");
      const auto i = std::stoul(name.substr(prefix.size()));
      if (i >= buffers_.size()) throw ShapeError("optimizer state: \"" + name + "\" does not match the parameters");
      buffers_[i] = t.clone();
    }
  }

 private:
  double momentum_;
  std::vector<at::Tensor> buffers_;
};

}  // namespace

void Optimizer::zero_grad() {
  RECORD_USER_SCOPE(ops::region::kOptimizer);
  for (auto& g : groups_)
    for (auto& p : g.params)
      if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

std::vector<ParamGroup> make_param_groups(const std::vector<std::pair<std::string, at::Tensor>>& trainable,
                                          const OptimizerOptions& o) {
  ParamGroup decay{{}, o.weight_decay}, no_decay{{}, 0.0};
  for (const auto& [name, p] : trainable) {
    const bool exempt = !o.decay_norms_and_biases && p.dim() < 2;  // norm weights and biases
    (exempt ? no_decay : decay).params.push_back(p);
  }
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const OptimizerOptions& o) {
  if (o.name == "adamw") return std::make_unique<AdamW>(std::move(groups), o);
  if (o.name == "sgd") return std::make_unique<Sgd>(std::move(groups), o);
  throw ConfigError("optimizer.name: expected adamw or sgd, found \"" + o.name + "\"");
}

double squared_grad_norm(const std::vector<ParamGroup>& groups) {
  RECORD_USER_SCOPE(ops::region::kOptimizer);
  at::NoGradGuard no_grad;
  double total_sq = 0;
  for (const auto& g : groups)
    for (const auto& p : g.params)
      if (p.grad().defined()) {
        const auto fused = ops::sum_of_squares(p.grad());
        total_sq += fused ? *fused : p.grad().to(at::kDouble).pow(2).sum().item<double>();
      }
  return total_sq;
}

void clip_gradients(const std::vector<ParamGroup>& groups, double max_norm, double norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return;
  RECORD_USER_SCOPE(ops::region::kOptimizer);
  // torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6), clamped to 1.
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return;
  at::NoGradGuard no_grad;
  for (const auto& g : groups)
    for (const auto& p : g.params)
      if (p.grad().defined()) p.grad().mul_(coef);
}

}  // namespace ctune::train
