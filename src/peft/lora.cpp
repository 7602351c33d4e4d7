#include "peft/lora.h"

#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "model/moe.h"
#include "model/weights.h"
#include "ops/compute.h"

namespace ctune::peft {

double lora_scale(const LoraOptions& o) {
  return o.rslora ? o.alpha / std::sqrt(static_cast<double>(o.rank)) : o.alpha / static_cast<double>(o.rank);
}

LoraAdapter::LoraAdapter(model::LinearImpl& owner, const LoraOptions& o, at::Generator& gen)
    : scale(lora_scale(o)), dropout(o.dropout), owner_(&owner) {
  lora_A = owner.register_module("lora_A", model::Linear(owner.in_features, o.rank, false, o.dtype));
  lora_B = owner.register_module("lora_B", model::Linear(o.rank, owner.out_features, false, o.dtype));
  if (!o.initialise) return;
  at::NoGradGuard no_grad;
  // kaiming_uniform_(a=sqrt(5)) on [r, in]: bound = gain * sqrt(3 / fan_in) with
  // gain = sqrt(2 / (1 + a^2)) = sqrt(1/3), i.e. 1 / sqrt(in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(owner.in_features));
  auto a = at::empty(lora_A->weight.sizes(), at::TensorOptions().dtype(at::kFloat));
  a.uniform_(-bound, bound, gen);
  lora_A->weight.copy_(a);
  lora_B->weight.zero_();
}

at::Tensor LoraAdapter::apply(const at::Tensor& x, const at::Tensor& base) {
  // Under mixed precision the adapter's matmuls run in the compute dtype like the base's (its
  // fp32 weights are cast per use); otherwise in the adapter's own dtype.
  const auto dtype = lora_A->compute_dtype != at::ScalarType::Undefined ? lora_A->compute_dtype : lora_A->weight.scalar_type();
  auto h = x.to(dtype);
  if (dropout > 0 && owner_->is_training()) h = ops::dropout_any(h, dropout, /*train=*/true);
  auto down = lora_A->forward(h);  // [.., r]
  // base + scale · down Bᵀ as one GEMM that accumulates into a copy of base (addmm's alpha and
  // beta), where the dtypes allow: no separate pass for the scale and the sum, forward or
  // backward. (Where a GEMM of this dtype runs in fp32, ops/compute.h, the adapter's own linear
  // takes that route. addmm refuses an alpha past the float range, which an absurd lora_alpha
  // reaches: the plain product then makes the infs merge reports.)
  if (base.scalar_type() == dtype && !ops::gemm_in_fp32(dtype, base.device()) && base.dim() >= 1 &&
      std::abs(scale) <= std::numeric_limits<float>::max()) {
    const auto out = base.size(-1);
    auto b = lora_B->weight.to(dtype);  // [out, r]; a transient cast of the fp32 master
    return at::addmm(base.reshape({-1, out}), down.reshape({-1, down.size(-1)}), b.t(), /*beta=*/1, /*alpha=*/scale)
        .view(base.sizes());
  }
  auto delta = lora_B->forward(down) * scale;
  return base + delta.to(base.scalar_type());
}

namespace {
std::string leaf(const std::string& name) {
  auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

void count(model::CausalLM& lm, LoraSummary* s) {
  for (const auto& p : lm->parameters(true)) {
    s->total += p.numel();
    if (p.requires_grad()) s->trainable += p.numel();
  }
}
// Every router of the model (a model with experts), by module name.
std::vector<std::pair<std::string, model::RouterImpl*>> routers(model::CausalLM& lm) {
  std::vector<std::pair<std::string, model::RouterImpl*>> out;
  for (const auto& item : lm->named_modules("", /*include_self=*/false))
    if (auto* router = dynamic_cast<model::RouterImpl*>(item.value().get())) out.emplace_back(item.key(), router);
  return out;
}
}  // namespace

std::vector<std::string> linear_layer_names(model::CausalLM& lm) {
  std::vector<std::string> names;
  for (const auto& item : lm->named_modules("", /*include_self=*/false)) {
    if (!dynamic_cast<model::LinearImpl*>(item.value().get())) continue;
    const std::string name = leaf(item.key());
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

std::vector<std::string> resolve_targets(model::CausalLM& lm, const std::vector<std::string>& targets) {
  if (targets.empty()) throw ConfigError("peft.target_modules: expected at least one target");
  const auto linear = linear_layer_names(lm);
  std::vector<std::string> out;
  auto add = [&](const std::string& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  // Projections the checkpoint stores fused (Qwen3-Next's in_proj_qkvz): PEFT names the fused
  // module, so an adapter on one of its parts would have no PEFT form.
  const auto fused = model::fused_modules(lm->config());
  auto is_fused = [&](const std::string& t) { return std::find(fused.begin(), fused.end(), t) != fused.end(); };
  for (const auto& t : targets) {
    if (t == "all-linear") {
      for (const auto& name : linear)
        if (name != "lm_head" && !is_fused(name)) add(name);
      std::string left_out;
      for (const auto& name : fused) left_out += (left_out.empty() ? "" : ", ") + name;
      if (!left_out.empty())
        spdlog::info("peft.target_modules: all-linear leaves out {} ({} checkpoints store them fused: no PEFT form)", left_out,
                     lm->config().model_type);
      continue;
    }
    if (is_fused(t)) {
      throw UnsupportedError("peft.target_modules: \"" + t + "\" is stored fused with other projections in " +
                             lm->config().model_type + " checkpoints, so its adapter would have no PEFT form "
                             "(expected another Linear layer, e.g. out_proj or the attention and MLP projections)");
    }
    if (t == "lm_head" && lm->config().tie_word_embeddings) {
      throw ConfigError("peft.target_modules: lm_head is tied to the input embeddings in this model "
                        "(tie_word_embeddings: true); LoRA on lm_head needs an untied head");
    }
    if (std::find(linear.begin(), linear.end(), t) == linear.end()) {
      std::string known;
      for (const auto& name : linear) known += (known.empty() ? "" : ", ") + name;
      throw ConfigError("peft.target_modules: \"" + t + "\" is not a Linear layer of this model (" + lm->config().model_type +
                        ": expected " + known + " or all-linear)");
    }
    add(t);
  }
  return out;
}

LoraSummary apply_lora(model::CausalLM& lm, const LoraOptions& options) {
  LoraOptions o = options;
  o.targets = resolve_targets(lm, options.targets);
  for (auto& p : lm->parameters(true)) p.set_requires_grad(false);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  LoraSummary s;
  // named_modules() lists modules in registration order, so initialisation is deterministic.
  for (const auto& item : lm->named_modules("", /*include_self=*/false)) {
    auto* linear = dynamic_cast<model::LinearImpl*>(item.value().get());
    if (!linear || std::find(o.targets.begin(), o.targets.end(), leaf(item.key())) == o.targets.end()) continue;
    if (linear->adapter) throw ConfigError(item.key() + ": already has an adapter");
    linear->adapter = std::make_shared<LoraAdapter>(*linear, o, gen);
    s.wrapped.push_back(item.key());
  }
  for (const auto& t : o.targets) {
    bool found = false;
    for (const auto& w : s.wrapped) found = found || leaf(w) == t;
    if (!found) throw ConfigError("peft.target_modules: no layer named \"" + t + "\" in the model");
  }
  for (const auto& name : o.modules_to_save) {
    bool found = false;
    for (auto& [module, router] : routers(lm)) {
      if (leaf(module) != name) continue;
      // An fp32 master of its own (the base may be bf16, or a file mapped read-only), as full
      // fine-tuning keeps; the forward casts it to the compute dtype.
      at::NoGradGuard no_grad;
      router->weight.set_data(router->weight.detach().to(o.dtype).clone());
      router->weight.set_requires_grad(true);
      router->saved_with_adapter = found = true;
    }
    if (!found) {
      throw ConfigError("modules_to_save \"" + name + "\": no router of that name in the model (ctune trains the routers, \"gate\", " +
                        "of a model with experts: peft.train_router)");
    }
  }
  count(lm, &s);
  return s;
}

std::vector<std::pair<std::string, at::Tensor>> adapter_saved_modules(model::CausalLM& lm) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [module, router] : routers(lm))
    if (router->saved_with_adapter) out.emplace_back(module + ".weight", router->weight);
  return out;
}

std::size_t merge_lora(model::CausalLM& lm) {
  at::NoGradGuard no_grad;
  struct Layer {
    std::string name;
    model::LinearImpl* linear;
    LoraAdapter* lora;
  };
  std::vector<Layer> layers;
  for (const auto& item : lm->named_modules("", /*include_self=*/false)) {
    auto* linear = dynamic_cast<model::LinearImpl*>(item.value().get());
    if (!linear || !linear->adapter) continue;
    if (auto* lora = dynamic_cast<LoraAdapter*>(linear->adapter.get())) layers.push_back({item.key(), linear, lora});
  }
  Stage stage("merging LoRA", static_cast<std::int64_t>(layers.size()), "layers");
  for (auto& [name, linear, lora] : layers) {
    auto delta = at::matmul(lora->lora_B->weight.to(at::kFloat), lora->lora_A->weight.to(at::kFloat)) * lora->scale;
    auto merged = (linear->weight.to(at::kFloat) + delta).to(linear->weight.scalar_type());
    // A merged model with inf/NaN weights scores NaN everywhere: refuse it, naming the tensor
    // (an absurd lora_alpha, a diverged adapter, or a sum past the storage dtype's range).
    if (!at::isfinite(merged).all().item<bool>()) {
      throw FormatError("merging LoRA: " + name + ".weight holds non-finite values after merging (scale alpha/r = " +
                        std::to_string(lora->scale) + ", largest |B A| " + std::to_string(delta.abs().max().item<float>() / lora->scale) +
                        "); the adapter cannot be merged into this base");
    }
    linear->weight.set_data(merged);
    linear->adapter.reset();
    stage.advance(1, static_cast<std::uint64_t>(linear->weight.nbytes()));
  }
  stage.finish();
  for (auto& [module, router] : routers(lm)) {
    if (!router->saved_with_adapter) continue;
    router->weight.set_data(router->weight.detach().to(lm->model->embed_tokens->weight.scalar_type()));
    router->saved_with_adapter = false;
  }
  return layers.size();
}

LoraSummary enable_lora_training(model::CausalLM& lm) {
  LoraSummary s;
  for (auto& item : lm->named_parameters(true)) {
    const bool adapter = item.key().find(".lora_") != std::string::npos;
    item.value().set_requires_grad(adapter);
    if (adapter) {
      const auto dot = item.key().rfind(".lora_");
      if (s.wrapped.empty() || s.wrapped.back() != item.key().substr(0, dot)) s.wrapped.push_back(item.key().substr(0, dot));
    }
  }
  for (auto& [name, weight] : adapter_saved_modules(lm)) weight.set_requires_grad(true);
  count(lm, &s);
  return s;
}

LoraSummary enable_full_finetune(model::CausalLM& lm) {
  // Weights that train are written in place by the optimizer: they must own their memory. A
  // zero-copy view into a checkpoint mapped copy-on-write would keep the file's pages resident
  // and add a private copy of every page it writes (the weights counted twice).
  at::NoGradGuard no_grad;
  for (auto& p : lm->parameters(true)) {
    p.set_data(p.detach().clone());
    p.set_requires_grad(true);
  }
  LoraSummary s;
  count(lm, &s);
  return s;
}

}  // namespace ctune::peft
