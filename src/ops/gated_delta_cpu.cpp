// The gated delta rule's per-head CPU kernel (ops/gated_delta_cpu.h). Notation as in
// ops/gated_delta.h: per chunk of C tokens, cs the cumulative log decay, D[i,j] = exp(cs_i - cs_j)
// for j <= i in one document, Γ_i = exp(cs_i) while no document starts in [chunk start, i],
// w_j = D[C-1, j], Z = k̂ k̂ᵀ ⊙ D strictly lower, P = q̂ k̂ᵀ ⊙ D, A = diag(β) Z,
// T = (I + A)⁻¹, R = [W | Kc] = T [diag(β) v | diag(β Γ) k̂], U = W - Kc S,
// o = diag(Γ) q̂ S + P U, S' = Γ_{C-1} S + (diag(w) k̂)ᵀ U.
// Buffers are row-major blocks in a per-thread arena; rows past T are zero (β = g = 0: they
// write nothing).
#include "ops/gated_delta_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu_gemm.h"

namespace ctune::ops::gated_delta_cpu {

namespace {

struct Geometry {
  std::int64_t B, T, Hk, Hv, r, Dk, Dv, W, C, N;
};

// The chunking of T tokens of heads of Dk and Dv (the scratch sizes need no more).
Geometry geometry_for(std::int64_t T, std::int64_t Dk, std::int64_t Dv, std::int64_t chunk) {
  Geometry G{};
  G.T = T, G.Dk = Dk, G.Dv = Dv, G.W = Dk + Dv;
  G.C = std::min(chunk, T);
  G.N = (T + G.C - 1) / G.C;
  return G;
}

Geometry geometry_of(const Inputs& in) {
  Geometry G = geometry_for(in.q.size(1), in.q.size(3), in.v.size(3), in.chunk);
  G.B = in.q.size(0), G.Hk = in.q.size(2), G.Hv = in.v.size(2);
  G.r = G.Hv / G.Hk;
  return G;
}

// C[M, N] (ldc) = alpha op(A) op(B) + beta C.
void mm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A, std::int64_t lda,
        const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  cpu_gemm::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Hands out consecutive blocks of a float buffer; with a null base it only counts.
struct Arena {
  float* base = nullptr;
  std::int64_t used = 0;
  float* take(std::int64_t n) {
    float* p = base ? base + used : nullptr;
    used += n;
    return p;
  }
};

// One chunk of one (row, value head): its inputs padded to C rows.
struct Chunk {
  float *q, *k, *v, *beta, *g, *doc;  // doc: the number of starts in [chunk start, i]
  Chunk(Arena& a, const Geometry& G)
      : q(a.take(G.C * G.Dk)), k(a.take(G.C * G.Dk)), v(a.take(G.C * G.Dv)), beta(a.take(G.C)), g(a.take(G.C)), doc(a.take(G.C)) {}
};

// What the chunk's forward derives before it meets the state.
struct Derived {
  float *D, *Z, *P, *Tinv, *R, *U, *gamma, *w, *glast;
  Derived(Arena& a, const Geometry& G)
      : D(a.take(G.C * G.C)), Z(a.take(G.C * G.C)), P(a.take(G.C * G.C)), Tinv(a.take(G.C * G.C)), R(a.take(G.C * G.W)),
        U(a.take(G.C * G.Dv)), gamma(a.take(G.C)), w(a.take(G.C)), glast(a.take(1)) {}
};

// The inputs' rows and the pointers a task reads.
struct Source {
  const float *q, *k, *v, *g, *beta;
  const bool* starts;  // or null
  std::int64_t v_batch, v_time, v_head;  // v's strides: it may be a view of the convolution's output
};

Source source_of(const Inputs& in) {
  return {in.q.data_ptr<float>(), in.k.data_ptr<float>(), in.v.data_ptr<float>(), in.g.data_ptr<float>(),
          in.beta.data_ptr<float>(), in.starts.defined() ? in.starts.data_ptr<bool>() : nullptr,
          in.v.stride(0), in.v.stride(1), in.v.stride(2)};
}

// Copies chunk n of (b, h) into c, zero past T.
void load(const Geometry& G, const Source& s, std::int64_t b, std::int64_t h, std::int64_t n, Chunk& c) {
  const std::int64_t t0 = n * G.C, rows = std::min(G.C, G.T - t0), hk = h / G.r;
  float doc = 0;
  for (std::int64_t i = 0; i < G.C; ++i) {
    if (i >= rows) {
      std::memset(c.q + i * G.Dk, 0, sizeof(float) * G.Dk);
      std::memset(c.k + i * G.Dk, 0, sizeof(float) * G.Dk);
      std::memset(c.v + i * G.Dv, 0, sizeof(float) * G.Dv);
      c.beta[i] = c.g[i] = 0, c.doc[i] = doc;
      continue;
    }
    const std::int64_t bt = b * G.T + t0 + i;
    std::memcpy(c.q + i * G.Dk, s.q + (bt * G.Hk + hk) * G.Dk, sizeof(float) * G.Dk);
    std::memcpy(c.k + i * G.Dk, s.k + (bt * G.Hk + hk) * G.Dk, sizeof(float) * G.Dk);
    std::memcpy(c.v + i * G.Dv, s.v + b * s.v_batch + (t0 + i) * s.v_time + h * s.v_head, sizeof(float) * G.Dv);
    c.beta[i] = s.beta[bt * G.Hv + h], c.g[i] = s.g[bt * G.Hv + h];
    if (s.starts && s.starts[bt]) doc += 1;
    c.doc[i] = doc;
  }
}

// The decays, Z, P, T = (I + A)⁻¹ and R of one chunk (x: a [C, W] work buffer).
void derive(const Geometry& G, const Chunk& c, Derived& d, float* x) {
  const std::int64_t C = G.C;
  float cs = 0;
  for (std::int64_t i = 0; i < C; ++i) cs += c.g[i], d.gamma[i] = cs;  // cs kept in gamma for now
  const float cs_last = d.gamma[C - 1], doc_last = c.doc[C - 1];
  for (std::int64_t i = 0; i < C; ++i) {
    for (std::int64_t j = 0; j < C; ++j)
      d.D[i * C + j] = j <= i && c.doc[i] == c.doc[j] ? std::exp(d.gamma[i] - d.gamma[j]) : 0.f;
    d.w[i] = c.doc[i] == doc_last ? std::exp(cs_last - d.gamma[i]) : 0.f;
  }
  for (std::int64_t i = 0; i < C; ++i) d.gamma[i] = c.doc[i] == 0 ? std::exp(d.gamma[i]) : 0.f;
  *d.glast = d.gamma[C - 1];

  mm(false, true, C, C, G.Dk, 1.f, c.k, G.Dk, c.k, G.Dk, 0.f, d.Z, C);
  mm(false, true, C, C, G.Dk, 1.f, c.q, G.Dk, c.k, G.Dk, 0.f, d.P, C);
  for (std::int64_t i = 0; i < C * C; ++i) d.P[i] *= d.D[i];
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t j = 0; j < C; ++j) d.Z[i * C + j] = j < i ? d.Z[i * C + j] * d.D[i * C + j] : 0.f;

  // T = (I + diag(β) Z)⁻¹, unit lower triangular, row by row: T_i = e_i - Σ_{j<i} β_i Z_ij T_j
  // (T_j is zero right of j).
  std::fill(d.Tinv, d.Tinv + C * C, 0.f);
  for (std::int64_t i = 0; i < C; ++i) {
    float* Ti = d.Tinv + i * C;
    Ti[i] = 1.f;
    for (std::int64_t j = 0; j < i; ++j) {
      const float a = c.beta[i] * d.Z[i * C + j];
      if (a == 0.f) continue;
      const float* Tj = d.Tinv + j * C;
      for (std::int64_t m = 0; m <= j; ++m) Ti[m] -= a * Tj[m];
    }
  }
  // R = T [diag(β) v | diag(β Γ) k̂].
  for (std::int64_t i = 0; i < C; ++i) {
    float* xi = x + i * G.W;
    for (std::int64_t e = 0; e < G.Dv; ++e) xi[e] = c.beta[i] * c.v[i * G.Dv + e];
    const float bg = c.beta[i] * d.gamma[i];
    for (std::int64_t e = 0; e < G.Dk; ++e) xi[G.Dv + e] = bg * c.k[i * G.Dk + e];
  }
  mm(false, false, C, G.W, C, 1.f, d.Tinv, C, x, G.W, 0.f, d.R, G.W);
}

// U = W - Kc S, the chunk's output into `out` when given, then S becomes the state carried out
// (kw: a [C, Dk] work buffer).
void advance(const Geometry& G, const Chunk& c, Derived& d, float* S, float* out, float* kw) {
  const std::int64_t C = G.C;
  for (std::int64_t i = 0; i < C; ++i) std::memcpy(d.U + i * G.Dv, d.R + i * G.W, sizeof(float) * G.Dv);
  mm(false, false, C, G.Dv, G.Dk, -1.f, d.R + G.Dv, G.W, S, G.Dv, 1.f, d.U, G.Dv);
  if (out) {
    mm(false, false, C, G.Dv, G.Dk, 1.f, c.q, G.Dk, S, G.Dv, 0.f, out, G.Dv);
    for (std::int64_t i = 0; i < C; ++i)
      for (std::int64_t e = 0; e < G.Dv; ++e) out[i * G.Dv + e] *= d.gamma[i];
    mm(false, false, C, G.Dv, C, 1.f, d.P, C, d.U, G.Dv, 1.f, out, G.Dv);
  }
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t e = 0; e < G.Dk; ++e) kw[i * G.Dk + e] = d.w[i] * c.k[i * G.Dk + e];
  for (std::int64_t i = 0; i < G.Dk * G.Dv; ++i) S[i] *= *d.glast;
  mm(true, false, G.Dk, G.Dv, C, 1.f, kw, G.Dk, d.U, G.Dv, 1.f, S, G.Dv);
}

void initial_state(const Geometry& G, const Inputs& in, std::int64_t b, std::int64_t h, float* S) {
  if (in.state.defined())
    std::memcpy(S, in.state.data_ptr<float>() + (b * G.Hv + h) * G.Dk * G.Dv, sizeof(float) * G.Dk * G.Dv);
  else
    std::fill(S, S + G.Dk * G.Dv, 0.f);
}

// Rows [t0, t0 + rows) of a [C, width] block to [B, T, Hv, width] at (b, h).
void store_rows(const Geometry& G, const float* block, std::int64_t width, float* dst, std::int64_t b, std::int64_t h,
                std::int64_t t0) {
  const std::int64_t rows = std::min(G.C, G.T - t0);
  for (std::int64_t i = 0; i < rows; ++i)
    std::memcpy(dst + ((b * G.T + t0 + i) * G.Hv + h) * width, block + i * width, sizeof(float) * width);
}

// Runs task(thread's arena, b, h) for every (b, h) over ATen's threads, each thread on its own
// `per_thread` floats of one scratch tensor.
// Called inside a parallel region (no caller does today), it runs serially on one scratch: the
// thread numbers there are the outer team's.
template <typename Task>
void for_each_head(const Geometry& G, std::int64_t per_thread, const Task& task) {
  const std::int64_t tasks = G.B * G.Hv;
  const bool nested = at::in_parallel_region();
  const std::int64_t threads = nested ? 1 : std::min<std::int64_t>(at::get_num_threads(), tasks);
  auto scratch = at::empty({threads, per_thread}, at::TensorOptions().dtype(at::kFloat));
  float* base = scratch.data_ptr<float>();
  if (nested) {
    for (std::int64_t t = 0; t < tasks; ++t) task(base, t / G.Hv, t % G.Hv);
    return;
  }
  at::parallel_for(0, tasks, 1, [&](std::int64_t begin, std::int64_t end) {
    float* mine = base + std::min<std::int64_t>(at::get_thread_num(), threads - 1) * per_thread;
    for (std::int64_t t = begin; t < end; ++t) task(mine, t / G.Hv, t % G.Hv);
  });
}

// The forward's arena: one chunk, its derived quantities, the state and work buffers.
struct ForwardWork {
  Chunk c;
  Derived d;
  float *S, *x, *out, *kw;
  ForwardWork(Arena& a, const Geometry& G)
      : c(a, G), d(a, G), S(a.take(G.Dk * G.Dv)), x(a.take(G.C * G.W)), out(a.take(G.C * G.Dv)), kw(a.take(G.C * G.Dk)) {}
};

std::int64_t forward_elements(const Geometry& G) {
  Arena a;
  ForwardWork w(a, G);
  return a.used;
}

// The backward's arena: every chunk's derived quantities and carried state, and one chunk's
// work buffers.
struct BackwardWork {
  Chunk c;
  std::vector<Derived> d;
  float* S_all;  // [N + 1, Dk, Dv]
  float *x, *kw, *dO, *dU, *dKw, *qg, *dq, *dk, *dv, *dR, *dX, *dA, *dP, *M1, *M2, *dS, *dgamma, *dcs, *dg, *dbeta;
  BackwardWork(Arena& a, const Geometry& G) : c(a, G) {
    for (std::int64_t n = 0; n < G.N; ++n) d.emplace_back(a, G);
    const std::int64_t C = G.C;
    S_all = a.take((G.N + 1) * G.Dk * G.Dv);
    x = a.take(C * G.W), kw = a.take(C * G.Dk), dO = a.take(C * G.Dv), dU = a.take(C * G.Dv), dKw = a.take(C * G.Dk);
    qg = a.take(C * G.Dk), dq = a.take(C * G.Dk), dk = a.take(C * G.Dk), dv = a.take(C * G.Dv);
    dR = a.take(C * G.W), dX = a.take(C * G.W), dA = a.take(C * C), dP = a.take(C * C), M1 = a.take(C * C), M2 = a.take(C * C);
    dS = a.take(G.Dk * G.Dv), dgamma = a.take(C), dcs = a.take(C), dg = a.take(C), dbeta = a.take(C);
  }
};

std::int64_t backward_elements(const Geometry& G) {
  Arena a;
  BackwardWork w(a, G);
  return a.used;
}

// The products with the state and the decays' gradients, chunk n (ops/gated_delta.h's backward
// for one head): w.dS holds dS_{n+1} and leaves holding dS_n; w.dq, dk, dv, dg, dbeta get the
// chunk's input gradients.
void chunk_backward(const Geometry& G, BackwardWork& w, const Derived& d, const float* Sn) {
  const std::int64_t C = G.C, Dk = G.Dk, Dv = G.Dv, W = G.W;
  const Chunk& c = w.c;
  const float* Kc = d.R + Dv;
  // dU = Pᵀ dO + Kw dS_{n+1}; dKw = U dS_{n+1}ᵀ; dΓ_last = <S_n, dS_{n+1}>.
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t e = 0; e < Dk; ++e) w.kw[i * Dk + e] = d.w[i] * c.k[i * Dk + e];
  mm(true, false, C, Dv, C, 1.f, d.P, C, w.dO, Dv, 0.f, w.dU, Dv);
  mm(false, false, C, Dv, Dk, 1.f, w.kw, Dk, w.dS, Dv, 1.f, w.dU, Dv);
  mm(false, true, C, Dk, Dv, 1.f, d.U, Dv, w.dS, Dv, 0.f, w.dKw, Dk);
  double dglast = 0;
  for (std::int64_t i = 0; i < Dk * Dv; ++i) dglast += static_cast<double>(Sn[i]) * w.dS[i];
  // dS_n = Γ_last dS_{n+1} + (diag(Γ) q̂)ᵀ dO - Kcᵀ dU.
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t e = 0; e < Dk; ++e) w.qg[i * Dk + e] = d.gamma[i] * c.q[i * Dk + e];
  for (std::int64_t i = 0; i < Dk * Dv; ++i) w.dS[i] *= *d.glast;
  mm(true, false, Dk, Dv, C, 1.f, w.qg, Dk, w.dO, Dv, 1.f, w.dS, Dv);
  mm(true, false, Dk, Dv, C, -1.f, Kc, W, w.dU, Dv, 1.f, w.dS, Dv);
  // dq̂ = diag(Γ) dO S_nᵀ (+ below), dΓ_i = <q̂_i, (dO S_nᵀ)_i>; dP = dO Uᵀ.
  mm(false, true, C, Dk, Dv, 1.f, w.dO, Dv, Sn, Dv, 0.f, w.dq, Dk);
  for (std::int64_t i = 0; i < C; ++i) {
    float s = 0;
    for (std::int64_t e = 0; e < Dk; ++e) s += c.q[i * Dk + e] * w.dq[i * Dk + e];
    w.dgamma[i] = s;
    for (std::int64_t e = 0; e < Dk; ++e) w.dq[i * Dk + e] *= d.gamma[i];
  }
  mm(false, true, C, C, Dv, 1.f, w.dO, Dv, d.U, Dv, 0.f, w.dP, C);
  // Through R = T X: dR = [dU | -dU S_nᵀ], dX = Tᵀ dR, dA = -dX Rᵀ.
  for (std::int64_t i = 0; i < C; ++i) std::memcpy(w.dR + i * W, w.dU + i * Dv, sizeof(float) * Dv);
  mm(false, true, C, Dk, Dv, -1.f, w.dU, Dv, Sn, Dv, 0.f, w.dR + Dv, W);
  mm(true, false, C, W, C, 1.f, d.Tinv, C, w.dR, W, 0.f, w.dX, W);
  mm(false, true, C, C, W, -1.f, w.dX, W, d.R, W, 0.f, w.dA, C);
  for (std::int64_t i = 0; i < C; ++i) {
    const float* dVb = w.dX + i * W;
    const float* dKb = dVb + Dv;
    float vdv = 0, kdk = 0, az = 0;
    for (std::int64_t e = 0; e < Dv; ++e) vdv += c.v[i * Dv + e] * dVb[e], w.dv[i * Dv + e] = c.beta[i] * dVb[e];
    for (std::int64_t e = 0; e < Dk; ++e) kdk += c.k[i * Dk + e] * dKb[e];
    for (std::int64_t j = 0; j < i; ++j) az += w.dA[i * C + j] * d.Z[i * C + j];
    w.dbeta[i] = vdv + d.gamma[i] * kdk + az;
    const float bg = c.beta[i] * d.gamma[i];
    for (std::int64_t e = 0; e < Dk; ++e) w.dk[i * Dk + e] = bg * dKb[e];
    w.dgamma[i] += c.beta[i] * kdk;
  }
  // A = diag(β) Z, Z = k̂ k̂ᵀ ⊙ D strictly lower, P = q̂ k̂ᵀ ⊙ D: M1 = dZ ⊙ D, M2 = dP ⊙ D;
  // w.dA becomes dZ, kept for the decays.
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t j = 0; j < C; ++j) {
      const std::int64_t ij = i * C + j;
      w.dA[ij] = j < i ? w.dA[ij] * c.beta[i] : 0.f;
      w.M1[ij] = w.dA[ij] * d.D[ij];
      w.M2[ij] = w.dP[ij] * d.D[ij];
    }
  mm(false, false, C, Dk, C, 1.f, w.M1, C, c.k, Dk, 1.f, w.dk, Dk);
  mm(true, false, C, Dk, C, 1.f, w.M1, C, c.k, Dk, 1.f, w.dk, Dk);
  mm(false, false, C, Dk, C, 1.f, w.M2, C, c.k, Dk, 1.f, w.dq, Dk);
  mm(true, false, C, Dk, C, 1.f, w.M2, C, c.q, Dk, 1.f, w.dk, Dk);
  // To the cumulative log decay cs (D_ij = exp(cs_i - cs_j), Γ_i = exp(cs_i), w_j = exp(cs_{C-1}
  // - cs_j)), then g, whose suffix sums inside the chunk give cs's gradient.
  w.dgamma[C - 1] += static_cast<float>(dglast);
  float ww_sum = 0;
  for (std::int64_t i = 0; i < C; ++i) w.dcs[i] = 0;
  for (std::int64_t i = 0; i < C; ++i) {
    float kdkw = 0;
    for (std::int64_t e = 0; e < Dk; ++e) kdkw += w.dKw[i * Dk + e] * c.k[i * Dk + e], w.dk[i * Dk + e] += d.w[i] * w.dKw[i * Dk + e];
    const float ww = kdkw * d.w[i];
    ww_sum += ww;
    float row = 0;
    for (std::int64_t j = 0; j <= i; ++j) {
      const std::int64_t ij = i * C + j;
      const float y = w.dA[ij] * d.Z[ij] + w.dP[ij] * d.P[ij];
      row += y;
      w.dcs[j] -= y;
    }
    w.dcs[i] += row + w.dgamma[i] * d.gamma[i] - ww;
  }
  w.dcs[C - 1] += ww_sum;
  float suffix = 0;
  for (std::int64_t i = C - 1; i >= 0; --i) suffix += w.dcs[i], w.dg[i] = suffix;
}

}  // namespace

bool serves(at::Device device, at::ScalarType acc) {
  return acc == at::kFloat && device.is_cpu() && cpu_gemm::available();
}

Forward forward(const Inputs& in) {
  const Geometry G = geometry_of(in);
  const Source s = source_of(in);
  Forward f;
  f.out = at::empty({G.B, G.T, G.Hv, G.Dv}, in.v.options());
  f.state = at::empty({G.B, G.Hv, G.Dk, G.Dv}, in.v.options());
  float *out = f.out.data_ptr<float>(), *state = f.state.data_ptr<float>();
  for_each_head(G, forward_elements(G), [&](float* mine, std::int64_t b, std::int64_t h) {
    Arena a{mine};
    ForwardWork w(a, G);
    initial_state(G, in, b, h, w.S);
    for (std::int64_t n = 0; n < G.N; ++n) {
      load(G, s, b, h, n, w.c);
      derive(G, w.c, w.d, w.x);
      advance(G, w.c, w.d, w.S, w.out, w.kw);
      store_rows(G, w.out, G.Dv, out, b, h, n * G.C);
    }
    std::memcpy(state + (b * G.Hv + h) * G.Dk * G.Dv, w.S, sizeof(float) * G.Dk * G.Dv);
  });
  return f;
}

Grads backward(const Inputs& in, const at::Tensor& dout, const at::Tensor& dstate) {
  const Geometry G = geometry_of(in);
  const Source s = source_of(in);
  Grads r;
  const auto opt = in.v.options();
  r.dq = at::empty({G.B, G.T, G.Hv, G.Dk}, opt), r.dk = at::empty({G.B, G.T, G.Hv, G.Dk}, opt);
  r.dv = at::empty({G.B, G.T, G.Hv, G.Dv}, opt);
  r.dg = at::empty({G.B, G.T, G.Hv}, opt), r.dbeta = at::empty({G.B, G.T, G.Hv}, opt);
  const float* dO_all = dout.data_ptr<float>();
  for_each_head(G, backward_elements(G), [&](float* mine, std::int64_t b, std::int64_t h) {
    Arena a{mine};
    BackwardWork w(a, G);
    const std::int64_t SS = G.Dk * G.Dv;
    initial_state(G, in, b, h, w.S_all);
    for (std::int64_t n = 0; n < G.N; ++n) {  // the forward again, keeping each chunk's quantities and state
      load(G, s, b, h, n, w.c);
      derive(G, w.c, w.d[n], w.x);
      std::memcpy(w.S_all + (n + 1) * SS, w.S_all + n * SS, sizeof(float) * SS);
      advance(G, w.c, w.d[n], w.S_all + (n + 1) * SS, nullptr, w.kw);
    }
    if (dstate.defined())
      std::memcpy(w.dS, dstate.data_ptr<float>() + (b * G.Hv + h) * SS, sizeof(float) * SS);
    else
      std::fill(w.dS, w.dS + SS, 0.f);
    for (std::int64_t n = G.N - 1; n >= 0; --n) {
      load(G, s, b, h, n, w.c);
      const std::int64_t t0 = n * G.C, rows = std::min(G.C, G.T - t0);
      for (std::int64_t i = 0; i < G.C; ++i) {
        if (i < rows)
          std::memcpy(w.dO + i * G.Dv, dO_all + ((b * G.T + t0 + i) * G.Hv + h) * G.Dv, sizeof(float) * G.Dv);
        else
          std::fill(w.dO + i * G.Dv, w.dO + (i + 1) * G.Dv, 0.f);
      }
      chunk_backward(G, w, w.d[n], w.S_all + n * SS);
      store_rows(G, w.dq, G.Dk, r.dq.data_ptr<float>(), b, h, t0);
      store_rows(G, w.dk, G.Dk, r.dk.data_ptr<float>(), b, h, t0);
      store_rows(G, w.dv, G.Dv, r.dv.data_ptr<float>(), b, h, t0);
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t at_ = (b * G.T + t0 + i) * G.Hv + h;
        r.dg.data_ptr<float>()[at_] = w.dg[i];
        r.dbeta.data_ptr<float>()[at_] = w.dbeta[i];
      }
    }
  });
  return r;
}

std::int64_t backward_scratch_elements(std::int64_t T, std::int64_t Dk, std::int64_t Dv, std::int64_t chunk) {
  return backward_elements(geometry_for(T, Dk, Dv, chunk));
}

}  // namespace ctune::ops::gated_delta_cpu
