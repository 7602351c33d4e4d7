// The gated delta rule's chunked form as one CPU kernel per (batch row, value head), forward and
// backward (ops/gated_delta.h states the algebra; docs/performance.md#the-gated-delta-rule says
// why). ATen's batched form materialises every chunk quantity of every head at once ([C, C] and
// [C, D] per chunk: several times q, k and v) and runs its [64 x 128] products as one small GEMM
// per matrix; here one task walks one head's chunks in order with the chunk's blocks in the
// core's cache, its products single-threaded oneDNN GEMMs (ops/cpu_gemm.h), the tasks spread
// over ATen's thread pool. fp32 only: float64 (the tests' finite differences) and builds without
// oneDNN keep the batched form, which the kernel is tested against.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ctune::ops::gated_delta_cpu {

// Whether the kernel serves a call computing in `acc` on `device`.
bool serves(at::Device device, at::ScalarType acc);

// The rule's inputs, fp32, contiguous but for v, whose rows need only be (a view of the
// convolution's output: no copy).
struct Inputs {
  at::Tensor q;            // q̂ [B, T, Hk, Dk]: the unit query rows times Dk^-1/2
  at::Tensor k;            // k̂ [B, T, Hk, Dk]: the unit key rows
  at::Tensor v;            // [B, T, Hv, Dv], stride 1 along Dv
  at::Tensor g, beta;      // [B, T, Hv]
  at::Tensor starts;       // [B, T] bool (true at a document's first token), or undefined
  at::Tensor state;        // [B, Hv, Dk, Dv] carried in, or undefined (zeros)
  std::int64_t chunk = 64;
};

struct Forward {
  at::Tensor out;    // [B, T, Hv, Dv] fp32
  at::Tensor state;  // [B, Hv, Dk, Dv] fp32: the state after the last token
};
Forward forward(const Inputs& in);

struct Grads {
  at::Tensor dq, dk;       // [B, T, Hv, Dk]: of q̂ and k̂ as each value head read them (sum over a key head's value heads)
  at::Tensor dv;           // [B, T, Hv, Dv]
  at::Tensor dg, dbeta;    // [B, T, Hv]
};
// dout [B, T, Hv, Dv] fp32; dstate [B, Hv, Dk, Dv] fp32 or undefined. Recomputes the forward.
Grads backward(const Inputs& in, const at::Tensor& dout, const at::Tensor& dstate);

// The backward's scratch per thread, in fp32 elements, for T tokens: the chunk quantities and
// carried states of one head's every chunk, and one chunk's work buffers.
std::int64_t backward_scratch_elements(std::int64_t T, std::int64_t Dk, std::int64_t Dv, std::int64_t chunk);

}  // namespace ctune::ops::gated_delta_cpu
