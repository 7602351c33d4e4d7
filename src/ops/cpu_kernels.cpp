// The fused element-wise kernels (cpu_kernels.h), compiled once per x86-64 level: CMake builds
// this file three times with -march=x86-64-v4, -march=x86-64-v3 and the baseline, defining
// CTUNE_ISA (the table's name) each time. Plain loops over vector_math.h, vectorized by the
// compiler (`#pragma omp simd`); what each computes is documented where it is used.
#include "ops/cpu_kernels.h"

#include <limits>
#include <type_traits>
#include <vector>

#include "ops/vector_math.h"

#ifndef CTUNE_ISA
#error "cpu_kernels.cpp is compiled with CTUNE_ISA set (src/ops/CMakeLists.txt)"
#endif
#define CTUNE_CAT2(a, b) a##b
#define CTUNE_CAT(a, b) CTUNE_CAT2(a, b)
#define CTUNE_STR2(a) #a
#define CTUNE_STR(a) CTUNE_STR2(a)

namespace ctune::ops {

namespace {

using vec::load;
using vec::store;

// ---- attention softmax (fused_softmax.h) ----------------------------------------------------

// z = scale · s, or cap · tanh(scale · s / cap); *t receives tanh(scale · s / cap) (0 without a
// cap). The cap is a template argument: a run-time test inside the loops keeps them scalar.
template <bool kCap, typename A>
CTUNE_INLINE A capped(A s, A scale, A cap, A* t) {
  const A z = s * scale;
  if constexpr (kCap) {
    *t = vec::tanh_of(z / cap);
    return cap * *t;
  }
  *t = 0;
  return z;
}

CTUNE_INLINE const std::uint8_t* mask_row(const SoftmaxArgs& a, std::int64_t r) {
  return a.mask + ((r / a.per_batch) * a.m + r % a.m) * a.mask_ld;
}

// S: the scores' type, T: the probabilities' type.
template <typename S, typename T, bool kCap>
void softmax_forward_rows(const SoftmaxArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<T>::type;
  const std::int64_t n = a.n;
  const A scale = static_cast<A>(a.scale), cap = static_cast<A>(a.softcap);
  const A lowest = -std::numeric_limits<A>::infinity();
  std::vector<A> work(static_cast<std::size_t>(n));
  A* z = work.data();
  for (std::int64_t r = begin; r < end; ++r) {
    const S* s = static_cast<const S*>(a.scores) + r * n;
    const std::uint8_t* allowed = mask_row(a, r);
    T* p = static_cast<T*>(a.probs) + r * n;
    A mx = lowest;
#pragma omp simd reduction(max : mx)
    for (std::int64_t j = 0; j < n; ++j) {
      A t;
      const A v = capped<kCap>(load(s, j), scale, cap, &t);
      z[j] = v;
      const A m = allowed[j] ? v : lowest;
      mx = m > mx ? m : mx;
    }
    if (mx == lowest) {  // nothing to attend: uniform, finite
      const A uniform = A(1) / static_cast<A>(n);
      for (std::int64_t j = 0; j < n; ++j) store(p, j, uniform);
      static_cast<A*>(a.lse)[r] = std::numeric_limits<A>::infinity();
      continue;
    }
    A sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j < n; ++j) {
      const A x = vec::exp_of(z[j] - mx);
      const A e = allowed[j] ? x : A(0);
      z[j] = e;
      sum += e;
    }
    const A inv = A(1) / sum;
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) store(p, j, z[j] * inv);
    static_cast<A*>(a.lse)[r] = mx + std::log(sum);
  }
}

template <typename S, typename T, bool kCap>
void softmax_backward_rows(const SoftmaxArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<T>::type;
  const std::int64_t n = a.n;
  const A scale = static_cast<A>(a.scale), cap = static_cast<A>(a.softcap);
  std::vector<A> work(static_cast<std::size_t>(2 * n));
  A* p = work.data();           // [n] probabilities
  A* derivative = p + n;        // [n] scale · cap'(z)
  for (std::int64_t r = begin; r < end; ++r) {
    const S* s = static_cast<const S*>(a.scores) + r * n;
    const S* dp = static_cast<const S*>(a.d_probs) + r * n;
    const std::uint8_t* allowed = mask_row(a, r);
    T* pr = static_cast<T*>(a.probs) + r * n;
    T* ds = static_cast<T*>(a.d_scores) + r * n;
    const A row_lse = static_cast<const A*>(a.lse)[r];
    if (std::isinf(row_lse)) {  // the forward's uniform row: no score moved it
      const A uniform = A(1) / static_cast<A>(n);
      for (std::int64_t j = 0; j < n; ++j) {
        store(pr, j, uniform);
        store(ds, j, A(0));
      }
      continue;
    }
    A dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t j = 0; j < n; ++j) {
      A t;
      const A z = capped<kCap>(load(s, j), scale, cap, &t);
      const A x = vec::exp_of(z - row_lse);
      const A e = allowed[j] ? x : A(0);
      p[j] = e;
      derivative[j] = kCap ? scale * (A(1) - t * t) : scale;
      dot += e * load(dp, j);
    }
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) {
      store(pr, j, p[j]);
      store(ds, j, p[j] * (load(dp, j) - dot) * derivative[j]);
    }
  }
}

template <typename T, typename S = T>
void softmax_forward(const SoftmaxArgs& a, std::int64_t begin, std::int64_t end) {
  a.softcap > 0 ? softmax_forward_rows<S, T, true>(a, begin, end) : softmax_forward_rows<S, T, false>(a, begin, end);
}

template <typename T, typename S = T>
void softmax_backward(const SoftmaxArgs& a, std::int64_t begin, std::int64_t end) {
  a.softcap > 0 ? softmax_backward_rows<S, T, true>(a, begin, end) : softmax_backward_rows<S, T, false>(a, begin, end);
}

// ---- gated activation (fused_glu.h) ------------------------------------------------------------

// GELU's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename A>
CTUNE_INLINE A gelu_inner(A x) {
  return A(0.7978845608028654) * (x + A(0.044715) * x * x * x);
}

template <typename T, int kKind>
void glu_forward_rows(const GluArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<T>::type;
  for (std::int64_t r = begin; r < end; ++r) {
    const T* g = static_cast<const T*>(a.gate) + r * a.ld_gate;
    const T* u = static_cast<const T*>(a.up) + r * a.ld_up;
    T* o = static_cast<T*>(a.out) + r * a.ld_out;
#pragma omp simd
    for (std::int64_t j = 0; j < a.width; ++j) {
      const A x = load(g, j);
      const A act = kKind == 0 ? x * vec::sigmoid_of(x) : A(0.5) * x * (A(1) + vec::tanh_of(gelu_inner(x)));
      store(o, j, act * load(u, j));
    }
  }
}

template <typename T, int kKind>
void glu_backward_rows(const GluArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<T>::type;
  for (std::int64_t r = begin; r < end; ++r) {
    const T* g = static_cast<const T*>(a.gate) + r * a.ld_gate;
    const T* u = static_cast<const T*>(a.up) + r * a.ld_up;
    const T* d = static_cast<const T*>(a.d_out) + r * a.ld_d_out;
    T* dg = static_cast<T*>(a.d_gate) + r * a.ld_d_gate;
    T* du = static_cast<T*>(a.d_up) + r * a.ld_d_up;
#pragma omp simd
    for (std::int64_t j = 0; j < a.width; ++j) {
      const A x = load(g, j), dy = load(d, j);
      A act, slope;
      if constexpr (kKind == 0) {  // silu' = s (1 + x (1 - s))
        const A s = vec::sigmoid_of(x);
        act = x * s;
        slope = s * (A(1) + x * (A(1) - s));
      } else {  // 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2)
        const A t = vec::tanh_of(gelu_inner(x));
        act = A(0.5) * x * (A(1) + t);
        slope = A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * A(0.7978845608028654) * (A(1) + A(3 * 0.044715) * x * x);
      }
      store(dg, j, dy * load(u, j) * slope);
      store(du, j, dy * act);
    }
  }
}

template <typename T>
void glu_forward(const GluArgs& a, std::int64_t begin, std::int64_t end) {
  a.kind == 0 ? glu_forward_rows<T, 0>(a, begin, end) : glu_forward_rows<T, 1>(a, begin, end);
}

template <typename T>
void glu_backward(const GluArgs& a, std::int64_t begin, std::int64_t end) {
  a.kind == 0 ? glu_backward_rows<T, 0>(a, begin, end) : glu_backward_rows<T, 1>(a, begin, end);
}

// ---- cross entropy over the vocabulary (train/step/chunked_loss.h) ----------------------------

// kEntropy: the sweep also sums exp(z - max) z (GRPO's entropy); the training loss's sweep,
// without it, is the same loop as before the entropy existed.
template <typename T, bool kCap, bool kEntropy>
void cross_entropy_rows(const CrossEntropyArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<T>::type;
  const std::int64_t V = a.vocab;
  const A cap = static_cast<A>(a.softcap);
  const A lowest = -std::numeric_limits<A>::infinity();
  std::vector<A> work(static_cast<std::size_t>(2 * V));
  A* z = work.data();  // capped logits
  A* e = z + V;        // exp(z - max)
  for (std::int64_t r = begin; r < end; ++r) {
    const T* l = static_cast<const T*>(a.logits) + r * a.ld;
    A mx = lowest;
#pragma omp simd reduction(max : mx)
    for (std::int64_t j = 0; j < V; ++j) {
      A t;
      const A v = capped<kCap>(load(l, j), A(1), cap, &t);
      z[j] = v;
      mx = v > mx ? v : mx;
    }
    A sum = 0, ez = 0;  // ez: Σ exp(z - max) z, for the entropy
#pragma omp simd reduction(+ : sum, ez)
    for (std::int64_t j = 0; j < V; ++j) {
      const A x = vec::exp_of(z[j] - mx);
      e[j] = x;
      sum += x;
      if constexpr (kEntropy) ez += x * z[j];
    }
    const std::int64_t target = a.targets[r];
    const A lse = mx + std::log(sum);
    a.loss[r] = static_cast<double>(lse - z[target]);
    if constexpr (kEntropy) a.entropy[r] = static_cast<double>(lse - ez / sum);
    if (!a.grad) continue;
    T* g = static_cast<T*>(a.grad) + r * V;
    const A inv = A(1) / sum;
#pragma omp simd
    for (std::int64_t j = 0; j < V; ++j) {
      const A p = e[j] * inv - (j == target ? A(1) : A(0));
      const A q = z[j] / cap;
      store(g, j, kCap ? p * (A(1) - q * q) : p);
    }
  }
}

template <typename T>
void cross_entropy(const CrossEntropyArgs& a, std::int64_t begin, std::int64_t end) {
  if (a.entropy) {
    a.softcap > 0 ? cross_entropy_rows<T, true, true>(a, begin, end) : cross_entropy_rows<T, false, true>(a, begin, end);
  } else {
    a.softcap > 0 ? cross_entropy_rows<T, true, false>(a, begin, end) : cross_entropy_rows<T, false, false>(a, begin, end);
  }
}

// ---- RMSNorm (fused_norm.h) ---------------------------------------------------------------------

template <typename T>
using OutOf = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T, typename O>
void norm_forward_rows(const NormArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<T>::type;
  const std::int64_t D = a.dim;
  const A* w = static_cast<const A*>(a.w);
  const A eps = static_cast<A>(a.eps);
  for (std::int64_t r = begin; r < end; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * D;
    O* out = static_cast<O*>(a.out) + r * D;
    A sq = 0;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t j = 0; j < D; ++j) {
      const A v = load(x, j);
      sq += v * v;
    }
    const A rstd = A(1) / std::sqrt(sq / static_cast<A>(D) + eps);
    static_cast<A*>(a.rstd)[r] = rstd;
    if (a.offset) {
#pragma omp simd
      for (std::int64_t j = 0; j < D; ++j) store(out, j, vec::round_to<T>(load(x, j) * rstd * w[j]));
    } else {
#pragma omp simd
      for (std::int64_t j = 0; j < D; ++j) store(out, j, w[j] * vec::round_to<T>(load(x, j) * rstd));
    }
  }
}

template <typename T, typename O>
void norm_backward_rows(const NormArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<T>::type;
  const std::int64_t D = a.dim;
  const A* w = static_cast<const A*>(a.w);
  A* dw = static_cast<A*>(a.d_weight);
  for (std::int64_t r = begin; r < end; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * D;
    const O* dout = static_cast<const O*>(a.d_out) + r * D;
    T* dx = static_cast<T*>(a.d_x) + r * D;
    const A rstd = static_cast<const A*>(a.rstd)[r];
    A dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t j = 0; j < D; ++j) dot += load(dout, j) * w[j] * load(x, j) * rstd;
    const A mean = dot / static_cast<A>(D);
#pragma omp simd
    for (std::int64_t j = 0; j < D; ++j) {
      const A y = load(x, j) * rstd;
      store(dx, j, rstd * (load(dout, j) * w[j] - y * mean));
    }
    if (!dw) continue;
    if (a.offset) {
#pragma omp simd
      for (std::int64_t j = 0; j < D; ++j) dw[j] += load(dout, j) * load(x, j) * rstd;
    } else {
#pragma omp simd
      for (std::int64_t j = 0; j < D; ++j) dw[j] += load(dout, j) * vec::round_to<T>(load(x, j) * rstd);
    }
  }
}

template <typename T>
void norm_forward_same(const NormArgs& a, std::int64_t b, std::int64_t e) { norm_forward_rows<T, T>(a, b, e); }
template <typename T>
void norm_forward_f32(const NormArgs& a, std::int64_t b, std::int64_t e) { norm_forward_rows<T, OutOf<T>>(a, b, e); }
template <typename T>
void norm_backward_same(const NormArgs& a, std::int64_t b, std::int64_t e) { norm_backward_rows<T, T>(a, b, e); }
template <typename T>
void norm_backward_f32(const NormArgs& a, std::int64_t b, std::int64_t e) { norm_backward_rows<T, OutOf<T>>(a, b, e); }

// ---- rotary embeddings (fused_rope.h) -----------------------------------------------------------

template <typename In, typename Out>
void rope_forward(const RopeArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<In>::type;
  const std::int64_t half = a.rot / 2;
  for (std::int64_t row = begin; row < end; ++row) {
    const std::int64_t b = row / a.T, t = row % a.T;
    const A* c = static_cast<const A*>(a.cos) + row * a.rot;
    const A* s = static_cast<const A*>(a.sin) + row * a.rot;
    for (std::int64_t h = 0; h < a.heads; ++h) {
      const In* x = static_cast<const In*>(a.x) + b * a.sb + t * a.st + h * a.sh;
      Out* o = static_cast<Out*>(a.out) + ((b * a.heads + h) * a.T + t) * a.d;
#pragma omp simd
      for (std::int64_t i = 0; i < half; ++i) {
        const A x1 = load(x, i), x2 = load(x, i + half);
        store(o, i, x1 * c[i] - x2 * s[i]);
        store(o, i + half, x2 * c[i] + x1 * s[i]);
      }
      for (std::int64_t i = a.rot; i < a.d; ++i) store(o, i, load(x, i));
    }
  }
}

template <typename In, typename Out>
void rope_backward(const RopeArgs& a, std::int64_t begin, std::int64_t end) {
  using A = typename vec::Acc<In>::type;
  const std::int64_t half = a.rot / 2;
  for (std::int64_t row = begin; row < end; ++row) {
    const std::int64_t b = row / a.T, t = row % a.T;
    const A* c = static_cast<const A*>(a.cos) + row * a.rot;
    const A* s = static_cast<const A*>(a.sin) + row * a.rot;
    for (std::int64_t h = 0; h < a.heads; ++h) {
      const Out* g = static_cast<const Out*>(a.d_out) + ((b * a.heads + h) * a.T + t) * a.d;
      In* dx = static_cast<In*>(a.d_x) + (row * a.heads + h) * a.d;
#pragma omp simd
      for (std::int64_t i = 0; i < half; ++i) {
        const A g1 = load(g, i), g2 = load(g, i + half);
        store(dx, i, g1 * c[i] + g2 * s[i]);
        store(dx, i + half, g2 * c[i] - g1 * s[i]);
      }
      for (std::int64_t i = a.rot; i < a.d; ++i) store(dx, i, load(g, i));
    }
  }
}

#define CTUNE_ROPE_ROW(fn, In) {&fn<In, float>, &fn<In, c10::BFloat16>, &fn<In, c10::Half>, nullptr}
#define CTUNE_ROPE_TABLE(fn)                                                                                       \
  {CTUNE_ROPE_ROW(fn, float), CTUNE_ROPE_ROW(fn, c10::BFloat16), CTUNE_ROPE_ROW(fn, c10::Half), \
   {nullptr, nullptr, nullptr, &fn<double, double>}}

// ---- optimizer step (fused_optimizer.h) ----------------------------------------------------------

// torch.optim.AdamW's single-tensor update, element by element in the same order: decay, the
// first moment by lerp (weight 1 - beta1 < 0.5: m + w (g - m)), the second moment, then
// p - step_size m / (sqrt(v) / bias2_sqrt + eps).
template <typename T>
void adamw(const AdamWArgs& a, std::int64_t begin, std::int64_t end) {
  T* p = static_cast<T*>(a.param);
  const T* g = static_cast<const T*>(a.grad);
  T* m = static_cast<T*>(a.exp_avg);
  T* v = static_cast<T*>(a.exp_avg_sq);
  const T decay = static_cast<T>(a.decay), w1 = static_cast<T>(1 - a.beta1), b2 = static_cast<T>(a.beta2),
          w2 = static_cast<T>(1 - a.beta2), eps = static_cast<T>(a.eps), bias2_sqrt = static_cast<T>(a.bias2_sqrt),
          step = static_cast<T>(a.step_size);
#pragma omp simd
  for (std::int64_t i = begin; i < end; ++i) {
    const T gi = g[i];
    const T pi = p[i] * decay;  // exact when there is no decay (decay 1)
    const T mi = m[i] + w1 * (gi - m[i]);
    const T vi = v[i] * b2 + w2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step * (mi / (std::sqrt(vi) / bias2_sqrt + eps));
  }
}

template <typename T>
bool scale_check(void* x, double scale, bool apply, std::int64_t begin, std::int64_t end) {
  T* d = static_cast<T*>(x);
  const T s = static_cast<T>(scale);
  int bad = 0;
#pragma omp simd reduction(max : bad)
  for (std::int64_t i = begin; i < end; ++i) {
    const T v = apply ? d[i] * s : d[i];
    d[i] = v;
    const T z = v - v;  // NaN exactly when v is inf or NaN
    bad = z != z ? 1 : bad;
  }
  return bad == 0;
}

template <typename T>
double sum_squares(const void* x, std::int64_t begin, std::int64_t end) {
  const T* d = static_cast<const T*>(x);
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t i = begin; i < end; ++i) sum += static_cast<double>(d[i]) * static_cast<double>(d[i]);
  return sum;
}

// ---- one row times a weight (row_product.h) ---------------------------------------------------

// 32 partial sums (four vectors of AVX2's eight, two of AVX-512's sixteen) keep the FMA units
// busy; a row is then a fixed tree of them, the same on every thread.
constexpr std::int64_t kDotLanes = 32;
#ifndef CTUNE_DOT_PREFETCH
#define CTUNE_DOT_PREFETCH 4096
#endif
constexpr std::int64_t kDotPrefetchBytes = CTUNE_DOT_PREFETCH;

template <typename T>
void dot_rows(const DotRowsArgs& a, std::int64_t begin, std::int64_t end, float* y) {
  const std::int64_t K = a.K;
  const float* x = a.x;
  for (std::int64_t n = begin; n < end; ++n) {
    const T* row = static_cast<const T*>(a.w) + n * K;
    float lanes[kDotLanes] = {};
    std::int64_t k = 0;
    for (; k + kDotLanes <= K; k += kDotLanes) {
      const char* ahead = reinterpret_cast<const char*>(row + k) + kDotPrefetchBytes;
      for (std::size_t line = 0; line < kDotLanes * sizeof(T); line += 64) __builtin_prefetch(ahead + line, 0, 0);
#pragma omp simd
      for (std::int64_t j = 0; j < kDotLanes; ++j) lanes[j] += load(row, k + j) * x[k + j];
    }
    for (std::int64_t width = kDotLanes / 2; width > 0; width /= 2) {
#pragma omp simd
      for (std::int64_t j = 0; j < width; ++j) lanes[j] += lanes[j + width];
    }
    float sum = lanes[0];
    for (; k < K; ++k) sum += load(row, k) * x[k];
    y[n - begin] = sum;
  }
}

#define CTUNE_FP32_F64(fn) {&fn<float>, nullptr, nullptr, &fn<double>}

// One entry per element type, in Elem's order.
#define CTUNE_PER_ELEM(fn) {&fn<float>, &fn<c10::BFloat16>, &fn<c10::Half>, &fn<double>}

}  // namespace

const CpuKernels& CTUNE_CAT(cpu_kernels_, CTUNE_ISA)() {
  static const CpuKernels table = {
      CTUNE_STR(CTUNE_ISA),
      CTUNE_PER_ELEM(softmax_forward),
      CTUNE_PER_ELEM(softmax_backward),
      {&softmax_forward<float, float>, &softmax_forward<c10::BFloat16, float>, nullptr, nullptr},
      {&softmax_backward<float, float>, &softmax_backward<c10::BFloat16, float>, nullptr, nullptr},
      CTUNE_PER_ELEM(glu_forward),
      CTUNE_PER_ELEM(glu_backward),
      CTUNE_PER_ELEM(cross_entropy),
      {{&norm_forward_same<float>, &norm_forward_f32<float>},
       {&norm_forward_same<c10::BFloat16>, &norm_forward_f32<c10::BFloat16>},
       {&norm_forward_same<c10::Half>, &norm_forward_f32<c10::Half>},
       {&norm_forward_same<double>, &norm_forward_f32<double>}},
      {{&norm_backward_same<float>, &norm_backward_f32<float>},
       {&norm_backward_same<c10::BFloat16>, &norm_backward_f32<c10::BFloat16>},
       {&norm_backward_same<c10::Half>, &norm_backward_f32<c10::Half>},
       {&norm_backward_same<double>, &norm_backward_f32<double>}},
      CTUNE_ROPE_TABLE(rope_forward),
      CTUNE_ROPE_TABLE(rope_backward),
      CTUNE_FP32_F64(adamw),
      CTUNE_FP32_F64(scale_check),
      CTUNE_FP32_F64(sum_squares),
      {&dot_rows<float>, &dot_rows<c10::BFloat16>, nullptr, nullptr},
  };
  return table;
}

}  // namespace ctune::ops
