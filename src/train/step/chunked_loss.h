// Cross-entropy over the vocabulary without ever holding all logits: positions are projected to
// the vocabulary a chunk at a time in forward (only the loss is kept) and again in backward
// (each chunk's softmax becomes its gradient and is dropped). With 49k-152k vocabularies the
// fp32 logits are otherwise the largest buffer of a small model's step.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace ctune::train {

// Sum over rows of -log softmax(cap(hidden · weightᵀ))[target], logits in fp32, where
// cap(z) = softcap · tanh(z / softcap) when softcap > 0 (Gemma 2's final_logit_softcapping)
// and z otherwise. hidden: [N, H], weight: [V, H] (the output head), targets: [N] int64.
// `chunk_rows` rows are projected at a time (0: chosen so a chunk's fp32 logits stay near 16 MiB).
// `compute_dtype` is the projection's matmul dtype under mixed precision (Undefined: as stored);
// logits, softmax and the sum are fp32 either way.
at::Tensor chunked_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                     std::int64_t chunk_rows = 0, at::ScalarType compute_dtype = at::ScalarType::Undefined,
                                     double softcap = 0);

// The rows per chunk that keep one chunk's fp32 logits under `budget_bytes`.
std::int64_t default_chunk_rows(std::int64_t vocab, std::int64_t budget_bytes = 16ll << 20);

}  // namespace ctune::train
