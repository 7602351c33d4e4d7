#include "model/decoder.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <tuple>

#include "core/error.h"
#include "model/rope.h"
#include "ops/compute.h"
#include "ops/memory_phase.h"

namespace ctune::model {

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, at::ScalarType dtype, std::int64_t layer,
                                   std::shared_ptr<RouterRecord> record) {
  if (c.arch.linear.layer(layer)) {
    linear_attn = register_module("linear_attn", GatedDeltaNet(c, dtype));
  } else {
    self_attn = register_module("self_attn", Attention(c, dtype));
  }
  if (c.arch.moe.sparse(layer)) {
    moe = register_module(c.arch.names.sparse_mlp, SparseMoe(c, dtype, layer, std::move(record)));
  } else {
    mlp = register_module(c.arch.names.mlp, MLP(c, dtype));
  }
  input_layernorm = register_module("input_layernorm", config_norm(c, c.hidden_size, dtype));
  post_attention_layernorm = register_module("post_attention_layernorm", config_norm(c, c.hidden_size, dtype));
  if (c.arch.sandwich_norms) {
    pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", config_norm(c, c.hidden_size, dtype));
    post_feedforward_layernorm = register_module("post_feedforward_layernorm", config_norm(c, c.hidden_size, dtype));
  }
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor& x, const LayerInputs& in, LayerCache* cache) {
  if (recompute && !cache && is_training() && at::GradMode::is_enabled()) {
    // The layer outlives the backward pass (it belongs to the model being trained).
    return checkpointed_block([this, in](const at::Tensor& h) { return forward_block(h, in); }, x);
  }
  return forward_block(x, in, cache);
}

at::Tensor DecoderLayerImpl::forward_block(const at::Tensor& x, const LayerInputs& in, LayerCache* cache) {
  const auto feed_forward = [this](const at::Tensor& h) { return moe ? moe->forward(h) : mlp->forward(h); };
  const auto mix = [&](const at::Tensor& h) {
    return linear_attn ? linear_attn->forward(h, in.starts, in.token_mask, cache) : self_attn->forward(h, in.cos, in.sin, in.mask, cache);
  };
  if (pre_feedforward_layernorm) {
    auto h = x + post_attention_layernorm->forward(mix(input_layernorm->forward(x)));
    return h + post_feedforward_layernorm->forward(feed_forward(pre_feedforward_layernorm->forward(h)));
  }
  auto h = x + mix(input_layernorm->forward(x));
  return h + feed_forward(post_attention_layernorm->forward(h));
}

ActivationCost DecoderLayerImpl::saved_activations(const ModelConfig& config, const ActivationShape& s, std::int64_t layer) {
  const int norms = config.arch.sandwich_norms ? 4 : 2;  // Gemma's two more, over attention's and the MLP's outputs
  const ActivationCost attn = config.arch.linear.layer(layer) ? GatedDeltaNetImpl::saved_activations(config, s)
                                                              : AttentionImpl::saved_activations(config, s);
  const ActivationCost mlp =
      config.arch.moe.sparse(layer) ? SparseMoeImpl::saved_activations(config, s) : MLPImpl::saved_activations(config, s);
  ActivationCost a;
  // Two norms read the residual stream; Gemma's two more read the projections' outputs.
  a.saved = Term::num(2) * RMSNormImpl::saved_activations(s.n, s.H, s.r) + attn.saved + mlp.saved;
  if (config.arch.sandwich_norms) a.saved += Term::num(2) * RMSNormImpl::saved_activations(s.n, s.H, s.c);
  a.scores = attn.scores;
  a.workspace = attn.workspace;
  a.backward_workspace = attn.backward_workspace;
  a.freed_before_mixer = RMSNormImpl::saved_activations(s.n, s.H, s.r) + mlp.saved;
  a.parts = {std::to_string(norms) + " norms"};
  a.parts.insert(a.parts.end(), attn.parts.begin(), attn.parts.end());
  a.parts.insert(a.parts.end(), mlp.parts.begin(), mlp.parts.end());
  return a;
}

Term DecoderImpl::saved_outside_layers(const ModelConfig& config, const ActivationShape& s) {
  std::vector<std::int64_t> windows = config.arch.layer_windows;
  windows.push_back(0);
  std::sort(windows.begin(), windows.end());
  const auto masks = static_cast<std::int64_t>(std::unique(windows.begin(), windows.end()) - windows.begin());
  return RMSNormImpl::saved_activations(s.n, s.H, s.r) + s.r * s.n * s.H + (s.blocked ? Term::num(masks) * s.B * s.T * s.T : Term());
}

DecoderImpl::DecoderImpl(const ModelConfig& c, at::ScalarType dtype) {
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size, dtype));
  layers = register_module("layers", torch::nn::ModuleList());
  if (c.arch.moe.experts > 0) router_record = std::make_shared<RouterRecord>();
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    DecoderLayer layer(c, dtype, i, router_record);
    if (layer->self_attn) layer->self_attn->use_rope = c.arch.rope(i);
    layers->push_back(layer);
  }
  norm = register_module("norm", config_norm(c, c.hidden_size, dtype));
  inv_freq = rope_inv_freq(c.rope, c.head_dim);
  if (c.arch.local_rope) local_inv_freq = rope_inv_freq(*c.arch.local_rope, c.head_dim);
  if (c.rope.type == "longrope") {
    long_inv_freq = rope_long_inv_freq(c.rope, c.head_dim);
    long_from = c.rope.original_max_position;
    rope_scale = c.rope.attention_factor;
  }
  if (c.rope.type == "yarn") rope_scale = c.rope.attention_factor;
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    windows.push_back(c.arch.window(i));
    local_rope_layers.push_back(c.arch.local_rope_layer(i));
  }
  embed_scale = c.arch.embed_scale;
  linear_layers = c.arch.linear.any();
}

at::Tensor DecoderImpl::forward(const ForwardInputs& in) {
  const auto B = in.input_ids.size(0), T = in.input_ids.size(1);
  const auto past = in.cache ? in.cache->length() : 0;
  if (router_record) {
    if (in.router_mask.defined() && is_training()) {
      router_record->begin(in.router_mask, static_cast<std::int64_t>(layers->size()));
    } else {
      router_record->clear();
    }
  }
  ops::set_memory_phase_layer(ops::kPhaseEmbedding);
  scopes->enter(ParamScopes::kEmbedding, in.input_ids);
  auto x = scopes->leave(ParamScopes::kEmbedding, embed_tokens->forward(in.input_ids));
  if (embed_scale) {
    // sqrt(hidden) rounded to the activations' dtype first, as transformers' Gemma does.
    x = x * at::scalar_tensor(std::sqrt(static_cast<double>(x.size(-1))), x.options()).to(x.scalar_type());
  }
  const bool long_rope = long_inv_freq.defined() && in.position_ids.numel() > 0 &&
                         in.position_ids.max().item<std::int64_t>() + 1 > long_from;
  auto [cos, sin] = rope_cos_sin(long_rope ? long_inv_freq : inv_freq, in.position_ids, x.scalar_type(), rope_scale);
  at::Tensor local_cos, local_sin;
  if (local_inv_freq.defined()) std::tie(local_cos, local_sin) = rope_cos_sin(local_inv_freq, in.position_ids, x.scalar_type());
  // One mask per window the layers use (0: the whole causal context), built once per forward.
  std::map<std::int64_t, at::Tensor> masks;
  auto mask_for = [&](std::int64_t window) -> const at::Tensor& {
    auto it = masks.find(window);
    if (it == masks.end()) {
      it = masks.emplace(window, build_attention_mask(B, T, past + T, in.attention_mask, in.segment_ids,
                                                      in.input_ids.device(), window, in.prefix_ids, in.position_ids)).first;
    }
    return it->second;
  };
  const LayerInputs recurrent = linear_layers ? recurrent_inputs(in, T) : LayerInputs{};
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const auto scope = static_cast<std::int64_t>(i);
    ops::set_memory_phase_layer(scope);
    auto* layer = layers[i]->as<DecoderLayer>();
    LayerInputs layer_in = recurrent;
    if (layer->self_attn) {
      const bool local = i < local_rope_layers.size() && local_rope_layers[i];
      layer_in.cos = local ? local_cos : cos;
      layer_in.sin = local ? local_sin : sin;
      layer_in.mask = mask_for(i < windows.size() ? windows[i] : 0);
    }
    x = scopes->enter(scope, x);
    x = scopes->leave(scope, layer->forward(x, layer_in, in.cache ? &in.cache->layers[i] : nullptr));
  }
  ops::set_memory_phase_layer(ops::kPhaseHead);
  return norm->forward(scopes->enter(ParamScopes::kHead, x));
}

// A packed row's documents start where its segment id changes; without segments, padding is 0
// in the attention mask (its last T columns: this forward's tokens), zeroed by the DeltaNet.
LayerInputs DecoderImpl::recurrent_inputs(const ForwardInputs& in, std::int64_t T) {
  if (in.prefix_ids.defined())
    throw UnsupportedError("a shared prompt packed before its completions (prefix_ids) cannot feed Gated DeltaNet layers: "
                           "their state runs through the row in order (expected one completion per prompt row)");
  LayerInputs out;
  if (in.segment_ids.defined()) {
    const at::Tensor& seg = in.segment_ids;
    out.starts = at::ones_like(seg, seg.options().dtype(at::kBool));
    if (T > 1) out.starts.narrow(1, 1, T - 1).copy_(seg.narrow(1, 1, T - 1) != seg.narrow(1, 0, T - 1));
    // Padding (segment 0) follows a packed row's documents and starts its own: it reaches no
    // real token, so its inputs need no zeroing pass.
  } else if (in.attention_mask.defined()) {
    out.token_mask = in.attention_mask.narrow(1, in.attention_mask.size(1) - T, T) != 0;
  }
  return out;
}

CausalLMImpl::CausalLMImpl(ModelConfig config, at::ScalarType dtype) : config_(std::move(config)) {
  model = register_module("model", Decoder(config_, dtype));
  if (!config_.tie_word_embeddings) {
    lm_head = register_module("lm_head", Linear(config_.hidden_size, config_.vocab_size, false, dtype));
  }
}

at::Tensor CausalLMImpl::head(const at::Tensor& hidden) {
  auto logits = lm_head ? lm_head->forward(hidden) : ops::linear_in(hidden, model->embed_tokens->weight, {}, compute_dtype_);
  const double cap = config_.arch.final_softcap;
  return cap > 0 ? ops::tanh_any(logits / cap) * cap : logits;
}

at::Tensor CausalLMImpl::hidden(ForwardInputs in) {
  TORCH_CHECK(in.input_ids.dim() == 2, "input ids must be [batch, length], got ", in.input_ids.sizes());
  TORCH_CHECK(!(in.cache && in.segment_ids.defined()), "packed segments cannot be decoded with a KV cache");
  if (!in.position_ids.defined()) {
    const auto B = in.input_ids.size(0), T = in.input_ids.size(1);
    const auto past = in.cache ? in.cache->length() : 0;
    if (in.attention_mask.defined()) {
      // Left padding: real tokens count from 0; padding positions are clamped to 0.
      auto counted = (in.attention_mask.to(at::kLong).cumsum(-1) - 1).clamp_min(0);
      in.position_ids = counted.narrow(1, counted.size(1) - T, T);
    } else {
      in.position_ids = at::arange(past, past + T, at::TensorOptions().dtype(at::kLong).device(in.input_ids.device()))
                            .unsqueeze(0)
                            .expand({B, T});
    }
  }
  return model->forward(in);
}

at::Tensor CausalLMImpl::logits(ForwardInputs in) {
  return head(hidden(std::move(in)));
}

at::Tensor CausalLMImpl::forward(const at::Tensor& ids, const at::Tensor& attention_mask, const at::Tensor& position_ids) {
  ForwardInputs in;
  in.input_ids = ids;
  in.attention_mask = attention_mask;
  in.position_ids = position_ids;
  return logits(std::move(in));
}

void CausalLMImpl::set_recompute(const RecomputePolicy& policy) {
  for (std::size_t i = 0; i < model->layers->size(); ++i) {
    auto layer = model->layers[i]->as<DecoderLayer>();
    layer->recompute = policy.recompute_block(static_cast<std::int64_t>(i));
    if (layer->self_attn) layer->self_attn->kernel = policy.attention_kernel();
  }
}

void CausalLMImpl::set_compute_dtype(at::ScalarType dtype) {
  compute_dtype_ = dtype;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* linear = dynamic_cast<LinearImpl*>(module.get())) linear->compute_dtype = dtype;
    if (auto* router = dynamic_cast<RouterImpl*>(module.get())) router->compute_dtype = dtype;
    if (auto* experts = dynamic_cast<StackedExpertsImpl*>(module.get())) experts->compute_dtype = dtype;
  }
}

KVCache CausalLMImpl::new_cache(std::int64_t capacity) const {
  KVCache cache;
  cache.layers.resize(static_cast<std::size_t>(config_.num_hidden_layers));
  for (auto& layer : cache.layers) layer.capacity = capacity;
  return cache;
}

Term KVCache::bytes(const Term& layers, const Term& kv_heads, const Term& head_dim, const Term& positions, const Term& rows,
                    const Term& element) {
  return Term::num(2) * layers * kv_heads * head_dim * positions * rows * element;
}

Term KVCache::model_bytes(const ModelConfig& config, const Term& layers, const Term& kv_heads, const Term& head_dim,
                          const Term& positions, const Term& rows, const Term& element) {
  const auto& linear = config.arch.linear;
  const auto recurrent = static_cast<std::int64_t>(std::count(linear.layers.begin(), linear.layers.end(), true));
  if (recurrent == 0) return bytes(layers, kv_heads, head_dim, positions, rows, element);
  return bytes(layers - Term::num(recurrent), kv_heads, head_dim, positions, rows, element) +
         Term::num(recurrent) * rows * GatedDeltaNetImpl::state_bytes(linear, element);
}

std::int64_t CausalLMImpl::cache_bytes(std::int64_t rows, std::int64_t positions) const {
  const at::ScalarType dtype = compute_dtype_ != at::ScalarType::Undefined ? compute_dtype_ : model->embed_tokens->weight.scalar_type();
  return KVCache::model_bytes(config_, Term::num(config_.num_hidden_layers), Term::num(config_.num_key_value_heads),
                              Term::num(config_.head_dim), Term::num(positions), Term::num(rows),
                              Term::num(static_cast<std::int64_t>(c10::elementSize(dtype))))
      .value();
}

void KVCache::select_rows(const at::Tensor& rows) {
  for (auto& layer : layers) {
    for (auto* state : {&layer.conv_state, &layer.recurrent_state})
      if (state->defined()) *state = state->index_select(0, rows);
    if (!layer.k.defined()) continue;
    for (auto* buffer : {&layer.k, &layer.v}) {
      if (rows.numel() == buffer->size(0)) {
        auto held = buffer->narrow(2, 0, layer.length);
        held.copy_(held.index_select(0, rows));
      } else {
        *buffer = buffer->index_select(0, rows);  // fewer rows: a smaller buffer, its length kept
      }
    }
  }
}

at::ScalarType parse_dtype(const std::string& name, const std::string& where) {
  if (name == "fp32" || name == "float32" || name == "float") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "fp16" || name == "float16" || name == "half") return at::kHalf;
  throw ConfigError(where + ": expected a dtype (fp32, bf16, fp16), found \"" + name + "\"");
}

std::string dtype_to_hf(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: return "float32";
  }
}

}  // namespace ctune::model
