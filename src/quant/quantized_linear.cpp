#include "quant/quantized_linear.h"

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "ops/compute.h"
#include "ops/profile_regions.h"

namespace ctune::quant {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

QuantSpec::Kind parse_quant_kind(const std::string& name) {
  if (name == kQuantInt8) return QuantSpec::Int8;
  if (name == kQuantNf4) return QuantSpec::Nf4;
  throw ConfigError("quantised base \"" + name + "\": expected " + kQuantInt8 + " or " + kQuantNf4);
}

const char* quant_kind_name(QuantSpec::Kind kind) { return kind == QuantSpec::Int8 ? kQuantInt8 : kQuantNf4; }

std::int64_t QuantizedWeight::bytes() const { return int8 ? int8->bytes() : nf4->bytes(); }

at::Tensor QuantizedWeight::dequantize(at::ScalarType dtype) const {
  RECORD_USER_SCOPE(ops::region::kDequantize);
  return int8 ? quant::dequantize(*int8, dtype) : quant::dequantize(*nf4, dtype);
}

QuantizedWeight quantize_weight(const at::Tensor& w, const QuantSpec& spec) {
  if (w.dim() != 2) throw ShapeError("quantize_weight: a Linear weight is [out, in], found " + std::to_string(w.dim()) + "-D");
  QuantizedWeight q;
  q.spec = spec;
  q.shape = {w.size(0), w.size(1)};
  if (spec.kind == QuantSpec::Int8) {
    if (spec.threshold < 0) throw ConfigError("int8 threshold must be >= 0, found " + std::to_string(spec.threshold));
    q.int8 = quantize_int8(w);
  } else {
    q.nf4 = quantize_nf4(w, spec.blocksize, spec.double_quant);
  }
  return q;
}

namespace {

// Keeps the quantised weight alive inside the autograd node (an IValue capsule needs no
// custom-class registration).
struct WeightRef : torch::CustomClassHolder {
  explicit WeightRef(std::shared_ptr<const QuantizedWeight> w) : weight(std::move(w)) {}
  std::shared_ptr<const QuantizedWeight> weight;
};

// The frozen bias travels as a non-tensor argument: autograd neither tracks it nor accepts an
// undefined tensor among a Function's inputs.
struct FrozenBias {
  at::Tensor value;  // [out] or undefined
};

// y = x Wᵀ + b with W quantised; nothing but the weight reference and two dtypes is saved.
struct QuantizedLinearFunction : public torch::autograd::Function<QuantizedLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const FrozenBias& bias,
                            const std::shared_ptr<const QuantizedWeight>& w, at::ScalarType compute_dtype) {
    ctx->saved_data["weight"] = c10::IValue::make_capsule(c10::make_intrusive<WeightRef>(w));
    ctx->saved_data["compute_dtype"] = static_cast<std::int64_t>(compute_dtype);
    ctx->saved_data["x_dtype"] = static_cast<std::int64_t>(x.scalar_type());
    at::NoGradGuard no_grad;
    auto xc = x.to(compute_dtype);
    // x: [.., in] -> y: [.., out]
    auto y = (w->int8 && w->spec.int8_kernel == Int8Kernel::Int8Gemm)
                 ? int8_matmul(xc, *w->int8, w->spec.threshold, Int8Kernel::Int8Gemm)
                 : ops::matmul_nt(xc, w->dequantize(compute_dtype));
    if (bias.value.defined()) y = y + bias.value.to(compute_dtype);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto holder = ctx->saved_data["weight"].toCapsule();
    const auto& w = static_cast<WeightRef*>(holder.get())->weight;
    const auto compute_dtype = static_cast<at::ScalarType>(ctx->saved_data["compute_dtype"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    // grad_y: [.., out] · W_deq: [out, in] -> grad_x: [.., in], W dequantised again just in time.
    auto grad_x = ops::matmul_nn(grad_out[0].to(compute_dtype), w->dequantize(compute_dtype)).to(x_dtype);
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor quantized_linear(const at::Tensor& x, const std::shared_ptr<const QuantizedWeight>& w, const at::Tensor& bias,
                            at::ScalarType compute_dtype) {
  TORCH_CHECK(w, "quantized_linear: null weight");
  if (x.dim() < 1 || x.size(-1) != w->in_features()) {
    throw ShapeError("quantized_linear: input's last dimension is " + std::to_string(x.dim() ? x.size(-1) : 0) +
                     ", the " + w->kind_name() + " weight [" + std::to_string(w->out_features()) + ", " +
                     std::to_string(w->in_features()) + "] expects " + std::to_string(w->in_features()));
  }
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != w->out_features())) {
    throw ShapeError("quantized_linear: bias must be [" + std::to_string(w->out_features()) + "]");
  }
  TORCH_CHECK(!bias.defined() || !bias.requires_grad(), "quantized_linear: the bias of a quantised base is frozen");
  return QuantizedLinearFunction::apply(x, FrozenBias{bias.defined() ? bias.detach() : at::Tensor()}, w, compute_dtype);
}

}  // namespace ctune::quant

namespace ctune::quant::detail {

SavedForBackward saved_for_backward(const at::Tensor& y) {
  auto node = std::dynamic_pointer_cast<torch::autograd::CppNode<QuantizedLinearFunction>>(y.grad_fn());
  if (!node) throw std::invalid_argument("saved_for_backward: tensor was not produced by quantized_linear");
  SavedForBackward out;
  out.tensors = node->ctx_.get_saved_variables().size();
  for (const auto& kv : node->ctx_.saved_data) out.keys.push_back(kv.first);
  std::sort(out.keys.begin(), out.keys.end());
  auto holder = node->ctx_.saved_data.at("weight").toCapsule();
  out.weight = static_cast<WeightRef*>(holder.get())->weight.get();
  return out;
}

}  // namespace ctune::quant::detail
