#include "ops/compute.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "ops/cpu_features.h"
#include "ops/row_product.h"

namespace ctune::ops {

namespace {
std::atomic<bool> g_bf16_in_fp32{false};
}  // namespace

bool gemm_in_fp32(at::ScalarType dtype, at::Device device) {
  if (!device.is_cpu()) return false;
  if (dtype == at::kHalf) return true;
  static const bool native_bf16 = cpu_features::native_bf16_gemm();
  return dtype == at::kBFloat16 && (!native_bf16 || g_bf16_in_fp32.load());
}

Bf16GemmInFp32::Bf16GemmInFp32() : previous_(g_bf16_in_fp32.exchange(true)) {}
Bf16GemmInFp32::~Bf16GemmInFp32() { g_bf16_in_fp32 = previous_; }

std::int64_t gemm_kernel_cache_bytes(at::Device device, at::ScalarType compute) {
  // Only bf16 GEMMs go through oneDNN's primitives (fp32 ones through BLAS).
  if (!device.is_cpu() || compute != at::kBFloat16 || gemm_in_fp32(compute, device)) return 0;
  std::int64_t capacity = 1024;  // oneDNN's default
  for (const char* name : {"ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (end != v && *end == '\0' && n >= 0) capacity = n;
      break;
    }
  }
  return capacity * kGemmKernelBytes;
}

namespace {

// The CPU fp16 rule for element-wise operations (compute.h): they run in fp32 and round back.
bool half_on_cpu(const at::Tensor& t) { return t.defined() && t.scalar_type() == at::kHalf && t.device().is_cpu(); }

// The GEMM rule (compute.h): this operand's products run in fp32.
bool via_fp32(const at::Tensor& t) { return t.defined() && gemm_in_fp32(t.scalar_type(), t.device()); }

at::Tensor cast(const at::Tensor& t, at::ScalarType dtype) {
  return !t.defined() || dtype == at::ScalarType::Undefined || t.scalar_type() == dtype ? t : t.to(dtype);
}

at::Tensor fp32(const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; }

// a [M, K] · b [K, N] (+ bias [N]) in fp32 from 16-bit operands, rounded once to a's dtype.
// Where an operand or the fp32 result would pass kGemmBlockElements, in tiles of at most
// kGemmTile rows, columns and depth: each tile of the result summed in fp32 over the depth and
// rounded into place, an operand that fits converted once, the others a tile at a time. (The
// head's weight gradient, [vocabulary, rows] · [rows, hidden], would otherwise convert its
// [vocabulary, rows] operand whole: 400 MB on the SmolLM shape, past what the ledger counts.)
// One row times a weight stored [N, K] row by row (b = wᵀ): each output an fp32 dot product read
// straight from the 16-bit rows, one pass over the weight in its own bytes (row_product.h).
// Decoding one sequence multiplies one row; widening the weight first moved 5x its bytes (bf16
// decode at a third of fp32's speed on the SmolLM shape).
bool is_row_times_weight(const at::Tensor& a, const at::Tensor& b) {
  return a.size(0) == 1 && b.scalar_type() == at::kBFloat16 && b.stride(0) == 1 && b.stride(1) == b.size(0) && b.size(0) > 0;
}

at::Tensor row_times_weight(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias) {
  return row_product(fp32(a).contiguous(), b.t(), bias).unsqueeze(0).to(a.scalar_type());
}

at::Tensor product_2d(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias) {
  const auto dtype = a.scalar_type();
  const std::int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (is_row_times_weight(a, b)) return row_times_weight(a, b, bias);
  if (a.numel() <= kGemmBlockElements && b.numel() <= kGemmBlockElements && M * N <= kGemmBlockElements) {
    return (bias.defined() ? at::addmm(fp32(bias), fp32(a), fp32(b)) : at::mm(fp32(a), fp32(b))).to(dtype);
  }
  const auto a32 = a.numel() <= kGemmBlockElements ? fp32(a) : at::Tensor();
  const auto b32 = b.numel() <= kGemmBlockElements ? fp32(b) : at::Tensor();
  const auto tile = [](const at::Tensor& whole32, const at::Tensor& x, std::int64_t r, std::int64_t rows, std::int64_t c,
                       std::int64_t cols) {
    return whole32.defined() ? whole32.narrow(0, r, rows).narrow(1, c, cols) : fp32(x.narrow(0, r, rows).narrow(1, c, cols));
  };
  auto out = at::empty({M, N}, a.options().memory_format(at::MemoryFormat::Contiguous));
  for (std::int64_t i = 0; i < M; i += kGemmTile) {
    const auto mi = std::min(kGemmTile, M - i);
    for (std::int64_t j = 0; j < N; j += kGemmTile) {
      const auto nj = std::min(kGemmTile, N - j);
      at::Tensor acc;
      for (std::int64_t k = 0; k < K; k += kGemmTile) {
        const auto kk = std::min(kGemmTile, K - k);
        const auto p = tile(a32, a, i, mi, k, kk), q = tile(b32, b, k, kk, j, nj);
        if (acc.defined()) {
          acc.addmm_(p, q);
        } else {
          acc = bias.defined() ? at::addmm(fp32(bias.narrow(0, j, nj)), p, q) : at::mm(p, q);
        }
      }
      if (!acc.defined()) acc = bias.defined() ? fp32(bias.narrow(0, j, nj)).expand({mi, nj}) : at::zeros({mi, nj}, at::kFloat);  // K = 0
      out.narrow(0, i, mi).narrow(1, j, nj).copy_(acc);
    }
  }
  return out;
}

// product_2d, or a and b [batch, .., ..] with equal batches (no bias): as many batch entries at a
// time as keep each fp32 copy within kGemmBlockElements.
at::Tensor product_in_fp32(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias) {
  if (a.dim() == 2) return product_2d(a, b, bias);
  const std::int64_t batches = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  const std::int64_t per = std::max({M * K, K * N, M * N, std::int64_t{1}});
  if (batches * per <= kGemmBlockElements) return at::bmm(fp32(a), fp32(b)).to(a.scalar_type());
  auto out = at::empty({batches, M, N}, a.options().memory_format(at::MemoryFormat::Contiguous));
  const std::int64_t step = std::max<std::int64_t>(1, kGemmBlockElements / per);  // 1: one entry, tiled in product_2d
  for (std::int64_t s = 0; s < batches; s += step) {
    const auto n = std::min(step, batches - s);
    out.narrow(0, s, n).copy_(per > kGemmBlockElements ? product_2d(a[s], b[s], {}).unsqueeze(0)
                                                       : at::bmm(fp32(a.narrow(0, s, n)), fp32(b.narrow(0, s, n))));
  }
  return out;
}

at::Tensor transposed(const at::Tensor& t) { return t.transpose(-2, -1); }

// The fp32 route as autograd nodes: they save what a native 16-bit GEMM's node saves, the 16-bit
// operand each gradient needs and only that (a frozen weight's input is not kept: LoRA's frozen
// projections), and compute each gradient by the same route. Two nodes, since a custom
// function's inputs must all be defined: a · b, and a · b + bias.
void save_operands(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
  ctx->save_for_backward({b.requires_grad() ? a : at::Tensor(), a.requires_grad() ? b : at::Tensor()});
}

torch::autograd::variable_list product_grads(torch::autograd::AutogradContext* ctx, const at::Tensor& g) {
  const auto saved = ctx->get_saved_variables();
  at::Tensor da, db;
  if (ctx->needs_input_grad(0)) da = product_in_fp32(g, transposed(saved[1]), {});
  if (ctx->needs_input_grad(1)) db = product_in_fp32(transposed(saved[0]), g, {});
  return {da, db};
}

struct ProductInFp32 : public torch::autograd::Function<ProductInFp32> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    save_operands(ctx, a, b);
    return product_in_fp32(a, b, {});
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    return product_grads(ctx, grads[0]);
  }
};

struct BiasedProductInFp32 : public torch::autograd::Function<BiasedProductInFp32> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias) {
    save_operands(ctx, a, b);
    ctx->saved_data["bias_dtype"] = static_cast<std::int64_t>(bias.scalar_type());
    return product_in_fp32(a, b, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto out = product_grads(ctx, grads[0]);
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    out.push_back(ctx->needs_input_grad(2) ? fp32(grads[0]).sum(0).to(dtype) : at::Tensor());
    return out;
  }
};

at::Tensor apply_in_fp32(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias) {
  return bias.defined() ? BiasedProductInFp32::apply(a, b, bias) : ProductInFp32::apply(a, b);
}

// a2: [m, k], b2: [k, n] (any strides) -> [m, n] in a2's dtype.
at::Tensor mm_same_dtype(const at::Tensor& a2, const at::Tensor& b2) {
  TORCH_CHECK(a2.scalar_type() == b2.scalar_type(), "matmul: operand dtypes differ (", a2.scalar_type(), " vs ",
              b2.scalar_type(), ")");
  if (via_fp32(a2)) return ProductInFp32::apply(a2, b2);
  return at::mm(a2, b2);
}

std::vector<std::int64_t> with_last(at::IntArrayRef sizes, std::int64_t last) {
  std::vector<std::int64_t> out(sizes.begin(), sizes.end());
  out.back() = last;
  return out;
}

}  // namespace

at::Tensor linear_in(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::ScalarType dtype) {
  auto xc = cast(x, dtype), wc = cast(weight, dtype), bc = cast(bias, dtype);
  if (via_fp32(wc) || via_fp32(xc)) {
    if (xc.scalar_type() != wc.scalar_type() || xc.dim() == 0) {  // operands left in their own dtypes
      return at::linear(fp32(xc), fp32(wc), fp32(bc)).to(via_fp32(wc) ? wc.scalar_type() : xc.scalar_type());
    }
    const auto y = apply_in_fp32(xc.reshape({-1, xc.size(-1)}), wc.t(), bc);
    return y.view(with_last(xc.sizes(), wc.size(0)));
  }
  // One row (decoding one sequence): a matrix-vector product streams the weight once, where
  // BLAS gemm with a single row first packs a copy of the whole weight; measured about 2x on
  // the decode step (docs/performance.md, "Decode against PyTorch eager"). fp32 takes
  // row_product, whose caller does not wait for a descheduled thread ("Beside a neighbour").
  const auto& t = wc.scalar_type();
  if (xc.dim() >= 1 && row_product_applies(xc.reshape({-1}), wc, bc)) {
    return row_product(xc.reshape({-1}), wc, bc).view(with_last(xc.sizes(), wc.size(0)));
  }
  if (xc.dim() >= 1 && xc.numel() == xc.size(-1) && xc.is_cpu() && (t == at::kFloat || t == at::kDouble) && xc.scalar_type() == t) {
    const auto v = xc.reshape({-1});
    const auto y = bc.defined() ? at::addmv(bc, wc, v) : at::mv(wc, v);
    return y.view(with_last(xc.sizes(), wc.size(0)));
  }
  return at::linear(xc, wc, bc);
}

at::Tensor matmul_in(const at::Tensor& a, const at::Tensor& b, at::ScalarType dtype) {
  auto ac = cast(a, dtype), bc = cast(b, dtype);
  if (via_fp32(ac) || via_fp32(bc)) {
    // The shapes the model multiplies (a weight, or attention's equal batches) take the autograd
    // node; any other broadcast, the composite (which saves fp32 copies).
    const bool same = ac.scalar_type() == bc.scalar_type() && ac.dim() >= 2;
    if (same && bc.dim() == 2) {
      return ProductInFp32::apply(ac.reshape({-1, ac.size(-1)}), bc).view(with_last(ac.sizes(), bc.size(1)));
    }
    if (same && ac.dim() == bc.dim() && ac.sizes().slice(0, ac.dim() - 2) == bc.sizes().slice(0, bc.dim() - 2)) {
      const auto m = ac.size(-2), k = ac.size(-1), n = bc.size(-1);
      auto out = ProductInFp32::apply(ac.reshape({-1, m, k}), bc.reshape({-1, k, n}));
      return out.view(with_last(ac.sizes(), n));
    }
    return at::matmul(fp32(ac), fp32(bc)).to(via_fp32(ac) ? ac.scalar_type() : bc.scalar_type());
  }
  return at::matmul(ac, bc);
}

at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() >= 1 && b.dim() == 2 && a.size(-1) == b.size(1), "matmul_nt: a ", a.sizes(), " · bᵀ with b ",
              b.sizes(), " (need a[.., k], b[n, k])");
  return mm_same_dtype(a.reshape({-1, a.size(-1)}), b.t()).view(with_last(a.sizes(), b.size(0)));
}

at::Tensor matmul_nn(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() >= 1 && b.dim() == 2 && a.size(-1) == b.size(0), "matmul_nn: a ", a.sizes(), " · b with b ",
              b.sizes(), " (need a[.., n], b[n, k])");
  return mm_same_dtype(a.reshape({-1, a.size(-1)}), b).view(with_last(a.sizes(), b.size(1)));
}

at::Tensor silu_any(const at::Tensor& x) { return half_on_cpu(x) ? at::silu(fp32(x)).to(at::kHalf) : at::silu(x); }

at::Tensor gelu_tanh_any(const at::Tensor& x) {
  return half_on_cpu(x) ? at::gelu(fp32(x), "tanh").to(at::kHalf) : at::gelu(x, "tanh");
}

at::Tensor tanh_any(const at::Tensor& x) { return half_on_cpu(x) ? at::tanh(fp32(x)).to(at::kHalf) : at::tanh(x); }

at::Tensor dropout_any(const at::Tensor& x, double p, bool train) {
  return half_on_cpu(x) ? at::dropout(fp32(x), p, train).to(at::kHalf) : at::dropout(x, p, train);
}

}  // namespace ctune::ops
