#include "ops/attention_tiled.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <type_traits>
#include <vector>

#include "ops/attention_blocks.h"
#include "ops/cpu_gemm.h"
#include "ops/cpu_kernels.h"

namespace ctune::ops {

namespace {

// One call's shapes and its mask as contiguous bool rows [1 or B, Tq, Tk].
struct Call {
  std::int64_t B, h, hkv, groups, Tq, Tk, d;
  at::Tensor mask;
  std::int64_t mask_batch_stride;  // 0 when every batch row shares the mask
  std::vector<Block> blocks;
  std::int64_t max_m = 0, max_n = 0;
  double scale, softcap;

  const std::uint8_t* mask_at(std::int64_t b, const Block& blk) const {
    return reinterpret_cast<const std::uint8_t*>(mask.data_ptr<bool>()) + b * mask_batch_stride + blk.q0 * Tk + blk.k0;
  }
};

Call call_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask, double scale, double softcap) {
  Call c;
  c.B = q.size(0), c.h = q.size(1), c.hkv = k.size(1), c.groups = c.h / c.hkv;
  c.Tq = q.size(2), c.Tk = k.size(2), c.d = q.size(3);
  const bool shared = mask.dim() < 4 || mask.size(0) == 1;
  c.mask = mask.to(at::kBool).expand({shared ? 1 : c.B, 1, c.Tq, c.Tk}).contiguous();
  c.mask_batch_stride = shared ? 0 : c.Tq * c.Tk;
  c.blocks = plan_blocks(mask, c.B, c.Tq, c.Tk, kTileQueries);
  for (const Block& blk : c.blocks) c.max_m = std::max(c.max_m, blk.m), c.max_n = std::max(c.max_n, blk.n);
  c.scale = scale;
  c.softcap = softcap;
  return c;
}

std::atomic<std::int64_t> g_gemm_flops{0};

// 2 m n d per head and block for each of `products` GEMMs of [m, n] against d.
void count_flops(const Call& c, int products) {
  double pairs = 0;
  for (const Block& blk : c.blocks) pairs += static_cast<double>(blk.m) * static_cast<double>(blk.n);
  g_gemm_flops += static_cast<std::int64_t>(2.0 * products * static_cast<double>(c.B * c.h * c.d) * pairs);
}

// The sweep's arguments for one head's tile: rows are the block's queries, in the scratch
// buffers' layout [m, n]; lse points at the tile's first query.
SoftmaxArgs tile_args(const Call& c, std::int64_t b, const Block& blk, float* lse) {
  SoftmaxArgs a{};
  a.mask = c.mask_at(b, blk);
  a.n = blk.n;
  a.per_batch = blk.m;
  a.m = blk.m;
  a.mask_ld = c.Tk;
  a.scale = c.scale;
  a.softcap = c.softcap;
  a.lse = lse;
  return a;
}

// C[m, d] = A[m, n] · B[n, d] written to dst in T: straight into dst for fp32, else through the
// fp32 scratch and rounded once.
template <typename T>
void gemm_into(std::int64_t m, std::int64_t d, std::int64_t n, const T* A, const T* B, float* scratch, T* dst) {
  if constexpr (std::is_same_v<T, float>) {
    cpu_gemm::gemm(false, false, m, d, n, 1.f, A, n, B, d, 0.f, dst, d);
  } else {
    cpu_gemm::gemm(false, false, m, d, n, 1.f, A, n, B, d, 0.f, scratch, d);
    for (std::int64_t i = 0; i < m * d; ++i) dst[i] = static_cast<T>(scratch[i]);
  }
}

// Tasks per thread so that each gets at least kMinThreadWork multiply-adds: a decoding step's
// attention (one query per head over a short cache) runs on the calling thread, since waking a
// second thread for a few microseconds of work costs more than it saves, and the woken thread
// then spins where the decode's own workers run (docs/performance.md, "Beside a neighbour").
constexpr std::int64_t kMinThreadWork = std::int64_t{1} << 19;

std::int64_t forward_grain(const Call& c) {
  std::int64_t cells = 0;
  for (const Block& blk : c.blocks) cells += blk.m * blk.n;
  const std::int64_t tasks = std::max<std::int64_t>(c.B * c.hkv * static_cast<std::int64_t>(c.blocks.size()), 1);
  const std::int64_t per_task = std::max<std::int64_t>(c.B * c.hkv * cells * c.groups * c.d * 2 / tasks, 1);
  return std::max<std::int64_t>(1, kMinThreadWork / per_task);
}

template <typename T>
void forward_tiles(const Call& c, const T* q, const T* k, const T* v, T* out, float* lse) {
  const auto rows_fn = cpu_kernels().softmax_forward_f32_scores[elem_index(c10::CppTypeToScalarType<T>::value)];
  const auto nblk = static_cast<std::int64_t>(c.blocks.size());
  const auto d = c.d;
  const std::int64_t tasks = c.B * c.hkv * nblk, grain = forward_grain(c);
  std::optional<cpu_gemm::OnThisThread> serial;
  if (grain >= tasks) serial.emplace();
  at::parallel_for(0, tasks, grain, [&](std::int64_t begin, std::int64_t end) {
    // o: the fp32 rows gemm_into rounds from (bf16 only; fp32 writes straight into out).
    constexpr bool narrow = !std::is_same_v<T, float>;
    std::vector<float> scores(static_cast<std::size_t>(c.max_m * c.max_n)), o(narrow ? static_cast<std::size_t>(c.max_m * d) : 0);
    std::vector<T> probs(static_cast<std::size_t>(c.max_m * c.max_n));
    std::vector<float> no_lse(static_cast<std::size_t>(c.max_m));
    for (std::int64_t t = begin; t < end; ++t) {
      const auto b = t / (c.hkv * nblk), kv = t / nblk % c.hkv;
      const Block& blk = c.blocks[static_cast<std::size_t>(t % nblk)];
      const T* kp = k + ((b * c.hkv + kv) * c.Tk + blk.k0) * d;
      const T* vp = v + ((b * c.hkv + kv) * c.Tk + blk.k0) * d;
      for (std::int64_t j = 0; j < c.groups; ++j) {
        const auto row0 = (b * c.h + kv * c.groups + j) * c.Tq + blk.q0;  // the head's first query of the block
        cpu_gemm::gemm(false, true, blk.m, blk.n, d, 1.f, q + row0 * d, d, kp, d, 0.f, scores.data(), blk.n);
        SoftmaxArgs a = tile_args(c, b, blk, lse ? lse + row0 : no_lse.data());
        a.scores = scores.data();
        a.probs = probs.data();
        rows_fn(a, 0, blk.m);
        gemm_into(blk.m, d, blk.n, probs.data(), vp, o.data(), out + row0 * d);
      }
    }
  });
}

// Per (batch row, KV head), block by block and head by head, with P recomputed from the saved
// log-sum-exp: S = q kᵀ, dP = dO vᵀ, the sweep's P and dS, then dq = dS k, dk += dSᵀ q and
// dv += Pᵀ dO into the pair's fp32 accumulators.
template <typename T>
void backward_tiles(const Call& c, const T* q, const T* k, const T* v, const float* lse, const T* grad, T* dq, float* dk,
                    float* dv) {
  const auto rows_fn = cpu_kernels().softmax_backward_f32_scores[elem_index(c10::CppTypeToScalarType<T>::value)];
  const auto d = c.d;
  at::parallel_for(0, c.B * c.hkv, 1, [&](std::int64_t begin, std::int64_t end) {
    const auto tile = static_cast<std::size_t>(c.max_m * c.max_n);
    constexpr bool narrow = !std::is_same_v<T, float>;  // dq_tile as forward's o
    std::vector<float> scores(tile), d_probs(tile), dq_tile(narrow ? static_cast<std::size_t>(c.max_m * d) : 0);
    std::vector<T> probs(tile), d_scores(tile);
    for (std::int64_t pair = begin; pair < end; ++pair) {
      const auto b = pair / c.hkv, kv = pair % c.hkv;
      for (const Block& blk : c.blocks) {
        const auto key0 = (pair * c.Tk + blk.k0) * d;
        for (std::int64_t j = 0; j < c.groups; ++j) {
          const auto row0 = (b * c.h + kv * c.groups + j) * c.Tq + blk.q0;
          const T* qp = q + row0 * d;
          const T* gp = grad + row0 * d;
          cpu_gemm::gemm(false, true, blk.m, blk.n, d, 1.f, qp, d, k + key0, d, 0.f, scores.data(), blk.n);
          cpu_gemm::gemm(false, true, blk.m, blk.n, d, 1.f, gp, d, v + key0, d, 0.f, d_probs.data(), blk.n);
          SoftmaxArgs a = tile_args(c, b, blk, const_cast<float*>(lse + row0));
          a.scores = scores.data();
          a.d_probs = d_probs.data();
          a.probs = probs.data();
          a.d_scores = d_scores.data();
          rows_fn(a, 0, blk.m);
          gemm_into(blk.m, d, blk.n, d_scores.data(), k + key0, dq_tile.data(), dq + row0 * d);
          cpu_gemm::gemm(true, false, blk.n, d, blk.m, 1.f, d_scores.data(), blk.n, qp, d, 1.f, dk + key0, d);
          cpu_gemm::gemm(true, false, blk.n, d, blk.m, 1.f, probs.data(), blk.n, gp, d, 1.f, dv + key0, d);
        }
      }
    }
  });
}

}  // namespace

bool tiled_attention_applies(at::Device device, at::ScalarType dtype, std::int64_t pairs, std::int64_t threads) {
  const bool gemm = (dtype == at::kFloat || dtype == at::kBFloat16) && cpu_gemm::available();
  return gemm && device.is_cpu() && pairs >= threads;
}

bool tiled_attention_runs(const at::Tensor& q, const at::Tensor& k) {
  return tiled_attention_applies(q.device(), q.scalar_type(), q.size(0) * k.size(1), at::get_num_threads());
}

at::Tensor tiled_attention_forward(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& mask,
                                   double scale, double softcap, at::Tensor* lse) {
  const auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const Call c = call_of(q, k, mask, scale, softcap);
  auto out = at::empty(q.sizes(), q.options());
  if (lse) *lse = at::empty({c.B, c.h, c.Tq}, q.options().dtype(at::kFloat));
  float* lse_ptr = lse ? lse->data_ptr<float>() : nullptr;
  if (q.scalar_type() == at::kFloat) {
    forward_tiles(c, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(), lse_ptr);
  } else {
    forward_tiles(c, q.data_ptr<at::BFloat16>(), k.data_ptr<at::BFloat16>(), v.data_ptr<at::BFloat16>(),
                  out.data_ptr<at::BFloat16>(), lse_ptr);
  }
  count_flops(c, 2);  // S, then P v
  return out;
}

AttentionGrads tiled_attention_backward(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& mask,
                                        const at::Tensor& lse_in, const at::Tensor& grad_out, double scale, double softcap) {
  const auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const auto lse = lse_in.contiguous();
  const auto grad = grad_out.to(q.scalar_type()).contiguous();
  const Call c = call_of(q, k, mask, scale, softcap);
  AttentionGrads g;
  g.dq = at::empty(q.sizes(), q.options());
  auto dk = at::zeros(k.sizes(), k.options().dtype(at::kFloat));
  auto dv = at::zeros(v.sizes(), v.options().dtype(at::kFloat));
  if (q.scalar_type() == at::kFloat) {
    backward_tiles(c, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), lse.data_ptr<float>(), grad.data_ptr<float>(),
                   g.dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>());
  } else {
    backward_tiles(c, q.data_ptr<at::BFloat16>(), k.data_ptr<at::BFloat16>(), v.data_ptr<at::BFloat16>(), lse.data_ptr<float>(),
                   grad.data_ptr<at::BFloat16>(), g.dq.data_ptr<at::BFloat16>(), dk.data_ptr<float>(), dv.data_ptr<float>());
  }
  count_flops(c, 5);  // S, dP, dq, dk, dv
  g.dk = dk.to(k.scalar_type());
  g.dv = dv.to(v.scalar_type());
  return g;
}

double tiled_attention_gemm_flops() { return static_cast<double>(g_gemm_flops.load()); }

}  // namespace ctune::ops
