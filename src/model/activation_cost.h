// What a decoder layer keeps from forward to backward, as ledger terms (core/term.h), stated by
// each block beside its forward: AttentionImpl::saved_activations (attention.cpp),
// MLPImpl::saved_activations and DecoderLayerImpl::saved_activations (llama.cpp), the layer's
// norms being RMSNorm's (layers.cpp). The blocks read the Architecture; the memory ledger
// (train/forecast/memory_ledger.cpp) supplies the symbols and, through projection_input, what the
// training method keeps of each projection's input, and knows no architecture itself.
// Derivations: docs/formats.md#activations-per-layer.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/term.h"

namespace ctune::model {

struct ActivationShape {
  Term B, T, n, H, I, nh, nkv, d;  // n = B T tokens
  Term c;  // bytes of a matmul input (the compute dtype)
  Term r;  // bytes of the residual stream (the weights' storage dtype)
  bool dropout = false;  // some adapter drops out its input
  bool blocked = false;  // blocked attention (ops/attention.h): no scores kept
  bool router_z_loss = false;  // the routers' z-loss trains: each keeps its fp32 logits
  bool padded_expert_rows = false;  // routed row counts padded (model/moe.h pads_expert_rows)
  Term block_rows;       // blocked attention's query rows per block (bq)
  bool tiled_attention = false;  // the blocked kernel runs tiled (ops/attention_tiled.h)
  bool gated_delta_kernel = false;  // the DeltaNet's rule runs its per-head kernel (ops/gated_delta.h)
  Term threads;                  // tiled or that kernel: threads, each with its own scratch (th)
  // Bytes the named projection keeps of its [n, in_dim] input for backward: its weight's
  // gradient reads it when the weight trains, its adapter keeps its (dropped-out) input and its
  // rank-r intermediate.
  std::function<Term(const std::string& module, const Term& in_dim)> projection_input;
};

// One block's saving, and what it consists of, for the ledger's note.
struct ActivationCost {
  Term saved;      // kept per layer from forward to backward
  Term scores;     // of which the attention scores (what selective recompute drops)
  Term workspace;  // transient, one at a time (blocked attention's block)
  // Transient in the layer's backward only (the DeltaNet's recomputed chunks): it stands beside
  // what the layers before it keep, not beside the loss buffers.
  Term backward_workspace;
  // Of `saved`, what the layer's backward frees before it reaches its mixer (the MLP's saving
  // and the norm before it): gone when the backward workspace is needed.
  Term freed_before_mixer;
  std::vector<std::string> parts;
};

// Several projections reading one input (q/k/v, gate/up): without dropout, and when the input
// already has the matmul dtype (r == c), they share one saved copy; else each keeps its own
// (each casts its input, as autocast does).
Term shared_projection_input(const ActivationShape& s, std::initializer_list<const char*> modules, const Term& in_dim);

}  // namespace ctune::model
