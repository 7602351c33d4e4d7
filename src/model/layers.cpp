#include "model/layers.h"

#include <ATen/ATen.h>

#include "model/activation_cost.h"
#include "ops/compute.h"
#include "ops/fused_norm.h"
#include "quant/quantized_linear.h"

namespace ctune::model {

LinearImpl::LinearImpl(std::int64_t in, std::int64_t out, bool with_bias, at::ScalarType dtype)
    : in_features(in), out_features(out) {
  weight = register_parameter("weight", at::empty({out, in}, at::TensorOptions().dtype(dtype)));
  if (with_bias) bias = register_parameter("bias", at::empty({out}, at::TensorOptions().dtype(dtype)));
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  auto y = quantized ? quant::quantized_linear(x, quantized, bias,
                                              compute_dtype != at::ScalarType::Undefined ? compute_dtype : x.scalar_type())
                     : ops::linear_in(x, weight, bias, compute_dtype);
  return adapter && !AdaptersOff::active() ? adapter->apply(x, y) : y;
}

namespace {
thread_local bool adapters_off = false;
}

AdaptersOff::AdaptersOff() : was_(adapters_off) { adapters_off = true; }
AdaptersOff::~AdaptersOff() { adapters_off = was_; }
bool AdaptersOff::active() { return adapters_off; }

EmbeddingImpl::EmbeddingImpl(std::int64_t n, std::int64_t dim, at::ScalarType dtype) {
  weight = register_parameter("weight", at::empty({n, dim}, at::TensorOptions().dtype(dtype)));
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return at::embedding(weight, ids); }

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps_, at::ScalarType dtype, bool offset_, bool scale_fp32_)
    : eps(eps_), offset(offset_), scale_fp32(scale_fp32_) {
  weight = register_parameter("weight", at::empty({dim}, at::TensorOptions().dtype(dtype)));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  // An fp32 input keeps x̂ in fp32 through the scale; the one cast back is the output's.
  if (scale_fp32 && x.scalar_type() != at::kFloat && x.scalar_type() != at::kDouble)
    return ops::rms_norm(x.to(at::kFloat), weight, eps, offset).to(x.scalar_type());
  return ops::rms_norm(x, weight, eps, offset);
}

// The input, in its own dtype, and one fp32 statistic per row (ops/fused_norm.h).
Term RMSNormImpl::saved_activations(const Term& rows, const Term& dim, const Term& bytes) { return bytes * rows * dim + Term::num(4) * rows; }

Term shared_projection_input(const ActivationShape& s, std::initializer_list<const char*> modules, const Term& in_dim) {
  Term sum, first;
  for (const char* name : modules) {
    const Term b = s.projection_input(name, in_dim);
    sum += b;
    if (b.value() > first.value()) first = b;
  }
  return !s.dropout && s.r.value() == s.c.value() ? first : sum;
}

RMSNorm config_norm(const ModelConfig& config, std::int64_t dim, at::ScalarType dtype) {
  return RMSNorm(dim, config.rms_norm_eps, dtype, config.arch.norm_offset, config.arch.norm_scale_fp32);
}

Linear projection_linear(const ModelConfig& config, const std::string& name, at::ScalarType dtype) {
  const auto p = config.projection(name);
  return Linear(p.in, p.out, p.bias, dtype);
}

}  // namespace ctune::model
