// What this CPU's instructions decide about LibTorch's and oneDNN's kernels: the one place ctune
// asks the CPU which matmul paths are fast or exact here (docs/performance.md, "The CPU kinds").
// cpu_isa.cpp picks ctune's own kernel tables; cpu_gemm::bf16_available() asks oneDNN itself.
#pragma once

namespace ctune::ops::cpu_features {

// Whether LibTorch's CPU bf16 matmul runs a native kernel here: on x86-64 it takes oneDNN's bf16
// path only with AVX-512 BW, VL and DQ (1.13's mkldnn_bf16_device_check); elsewhere (AVX2 alone)
// it runs a scalar loop, measured about 20x below the fp32 GEMM (ops/compute.h routes around it).
// On AArch64 the bf16 instructions (BF16 in HWCAP2).
bool native_bf16_gemm();

// Whether oneDNN's u8 x s8 GEMM sums its products in int32 here (VNNI: avx512_vnni or avx_vnni).
// Without it oneDNN multiplies with vpmaddubsw, whose int16 sums of two products saturate
// (255 · 127 · 2 > 32767): measured 18x the activation-rounding bound from x W_deq^T on an
// AVX2-only AMD EPYC. Other architectures: true (int32 accumulation).
bool int32_int8_dot_products();

}  // namespace ctune::ops::cpu_features
