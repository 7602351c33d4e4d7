#include "quant/int8.h"

#include <ATen/core/grad_mode.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/quant_names.h"
#include "ops/compute.h"
#include "quant/int8_gemm.h"
#include "quant/storage_bytes.h"

namespace ctune::quant {

const char* int8_kernel_name(Int8Kernel kernel) {
  return kernel == Int8Kernel::Int8Gemm ? kInt8KernelGemm : kInt8KernelDequantize;
}

Int8Kernel parse_int8_kernel(const std::string& text) {
  if (text == kInt8KernelDequantize) return Int8Kernel::Dequantize;
  if (text == kInt8KernelGemm) {
    if (!int8_gemm_available()) throw UnsupportedError("int8 kernel int8_gemm: " + int8_gemm_unavailable_reason());
    return Int8Kernel::Int8Gemm;
  }
  throw ConfigError("int8 kernel: expected dequantize or int8_gemm, found \"" + text + "\"");
}

std::int64_t Int8Weight::bytes() const { return int8_weight_bytes(cb.size(0), cb.size(1)); }


namespace {

// 127 / absmax per row as one fp32 division (bitsandbytes' `127.0 / row_stats`), 0 where the
// absmax is 0 so all-zero rows give code 0 instead of NaN. absmax: fp32 [rows] -> [rows, 1].
at::Tensor row_scale(const at::Tensor& absmax) {
  auto inv = at::full_like(absmax, 127.0).div(absmax);
  return at::where(absmax > 0, inv, at::zeros_like(inv)).unsqueeze(1);
}

}  // namespace

Int8Weight quantize_int8(const at::Tensor& w) {
  if (w.dim() != 2) throw ShapeError("quantize_int8: weight must be [out, in], found " + std::to_string(w.dim()) + "-D");
  TORCH_CHECK(w.is_floating_point(), "quantize_int8: weight must be floating point, found ", w.scalar_type());
  at::NoGradGuard no_grad;
  auto wf = w.detach().to(at::kFloat).contiguous();
  Int8Weight q;
  q.scb = std::get<0>(wf.abs().max(1));                      // [out]
  q.cb = at::round(wf * row_scale(q.scb)).to(at::kChar);    // [out, in], |values| <= 127
  q.packed = std::make_shared<detail::PackedInt8>();
  return q;
}

at::Tensor dequantize(const Int8Weight& w, at::ScalarType dtype) {
  // One fused pass (this runs on every forward and backward): cb · scb in fp32, / 127 in fp32,
  // then rounded to dtype — the same operations as dequantize_columns' tensor expression.
  TORCH_CHECK(w.cb.device().is_cpu(), "int8 dequantize: CPU-resident weights only (CUDA dequantisation is not implemented), found ", w.cb.device());
  auto cb = w.cb.contiguous();
  auto scb = w.scb.contiguous();
  auto out = at::empty({w.out_features(), w.in_features()}, at::TensorOptions().dtype(dtype));
  const std::int8_t* codes = cb.data_ptr<std::int8_t>();
  const float* scale = scb.data_ptr<float>();
  const std::int64_t in = w.in_features();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "int8_dequantize", [&] {
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, w.out_features(), 16, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const float s = scale[r];
        for (std::int64_t k = 0; k < in; ++k) o[r * in + k] = static_cast<scalar_t>(float(codes[r * in + k]) * s / 127.0f);
      }
    });
  });
  return out;
}

at::Tensor dequantize_columns(const Int8Weight& w, const at::Tensor& cols, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  return (w.cb.index_select(1, cols).to(at::kFloat) * w.scb.unsqueeze(1) / 127.0).to(dtype);
}

namespace {

// Row-wise int8 quantisation of activations with outlier columns, fused into two passes.
// x2: [m, in] contiguous. Returns ca (fp32 integers in [-127, 127], outlier columns zeroed),
// row_stats (fp32 [m], absmax of the non-outlier values) and the outlier column indices.
struct QuantizedRows {
  at::Tensor ca, row_stats, outlier_cols;
};

QuantizedRows quantize_rows(const at::Tensor& x2, double threshold) {
  const std::int64_t m = x2.size(0), in = x2.size(1);
  QuantizedRows q{at::empty({m, in}, at::kFloat), at::empty({m}, at::kFloat), at::Tensor()};
  std::vector<std::uint8_t> outlier(in, 0);  // 1 where the column holds any |x| >= threshold
  float* ca = q.ca.data_ptr<float>();
  float* rs = q.row_stats.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x2.scalar_type(), "int8_quantize_rows", [&] {
    const scalar_t* x = x2.data_ptr<scalar_t>();
    const float thr = static_cast<float>(threshold);
    if (threshold > 0) {
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t k = 0; k < in; ++k) outlier[k] |= std::fabs(float(x[i * in + k])) >= thr;
    }
    at::parallel_for(0, m, 16, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const scalar_t* row = x + i * in;
        float amax = 0.0f;  // outlier values count as 0 (bitsandbytes zeroes them first)
        for (std::int64_t k = 0; k < in; ++k) {
          const float v = std::fabs(float(row[k]));
          if (threshold <= 0 || v < thr) amax = std::max(amax, v);
        }
        rs[i] = amax;
        const float scale = amax > 0.0f ? 127.0f / amax : 0.0f;  // one fp32 division, as bnb
        for (std::int64_t k = 0; k < in; ++k) {
          ca[i * in + k] = outlier[k] ? 0.0f : std::nearbyint(float(row[k]) * scale);  // half to even
        }
      }
    });
  });
  std::vector<std::int64_t> cols;
  for (std::int64_t k = 0; k < in; ++k)
    if (outlier[k]) cols.push_back(k);
  q.outlier_cols = at::tensor(cols, at::kLong);
  return q;
}

// LLM.int8 with the int8 GEMM. x2: [m, in] -> [m, out] in x2's dtype.
at::Tensor llm_int8_rows(const at::Tensor& x2, const Int8Weight& w, double threshold) {
  TORCH_CHECK(x2.device().is_cpu(), "int8_matmul Int8Gemm: CPU tensors only, found ", x2.device());
  auto x = x2.contiguous();
  auto q = quantize_rows(x, threshold);
  // gemm[i, j] = C[i, j] · scb[j]/127; out[i, j] = gemm[i, j] · row_stats[i]/127.
  auto gemm = detail::int8_gemm_rows(q.ca, w).contiguous();
  const std::int64_t m = gemm.size(0), n = gemm.size(1);
  auto out = at::empty({m, n}, x.options());
  const float* g = gemm.data_ptr<float>();
  const float* rs = q.row_stats.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "int8_scale_rows", [&] {
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, m, 16, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const float r = rs[i] / 127.0f;
        for (std::int64_t j = 0; j < n; ++j) o[i * n + j] = static_cast<scalar_t>(g[i * n + j] * r);
      }
    });
  });
  if (q.outlier_cols.numel() > 0) {
    // Mixed-precision part in x's dtype: x[:, cols] · (cb[:, cols] · scb / 127)ᵀ.
    out.add_(ops::matmul_nt(x.index_select(1, q.outlier_cols), dequantize_columns(w, q.outlier_cols, x.scalar_type())));
  }
  return out;
}

}  // namespace

at::Tensor int8_matmul(const at::Tensor& x, const Int8Weight& w, double threshold, Int8Kernel kernel) {
  if (x.dim() < 1 || x.size(-1) != w.in_features()) {
    throw ShapeError("int8_matmul: input's last dimension is " + std::to_string(x.dim() ? x.size(-1) : 0) +
                     ", weight expects in_features " + std::to_string(w.in_features()));
  }
  TORCH_CHECK(x.is_floating_point(), "int8_matmul: input must be floating point, found ", x.scalar_type());
  if (threshold < 0) throw ConfigError("int8_matmul: threshold must be >= 0, found " + std::to_string(threshold));
  if (kernel == Int8Kernel::Dequantize) return ops::matmul_nt(x, dequantize(w, x.scalar_type()));
  std::vector<std::int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = w.out_features();
  return llm_int8_rows(x.reshape({-1, w.in_features()}), w, threshold).view(out_shape);
}

}  // namespace ctune::quant
