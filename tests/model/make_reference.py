#!/usr/bin/env python3
"""Independent reference for ctune's model: tiny random Llama-family checkpoints and the
per-token NLL / argmax a Hugging Face-equivalent forward gives for them.

Written directly against PyTorch (python3-torch from Debian), following the computation in
transformers' modeling_llama.py / modeling_qwen2.py / modeling_qwen3.py / modeling_smollm3.py /
modeling_gemma2.py / modeling_gemma3.py / modeling_mixtral.py / modeling_qwen3_moe.py (see docs/formats.md#forward-computation and
docs/families.md), and modeling_qwen3_5.py / modeling_qwen3_5_moe.py / modeling_qwen3_next.py in
qwen3_5_reference.py (Gated DeltaNet computed token by token), modeling_gpt_oss.py in
gpt_oss_reference.py, with its own safetensors writer. It shares no code with ctune. The forward runs in float64 on the stored
(possibly bf16-rounded) weights; RoPE frequencies are computed in fp32 as HF does.

Usage: make_reference.py OUT_DIR [CASE ...]   (every case when none is named)
Writes OUT_DIR/<name>/ (config.json + safetensors) and OUT_DIR/<name>.reference.json with
{"ids": [...], "nll": [...], "argmax": [...], "min_margin": float, "nll_fp32_noise": float}: the
last is how far float32 rounding alone moves these NLLs (largest |dNLL|, tests/fp32_noise.py).
For the BEAM_CASES also OUT_DIR/<name>.beam.json: beam searches (beam_reference.py) over
BEAM_PROMPTS for each of BEAM_SETTINGS, in float64. For the Qwen3.5 and Qwen3-Next cases also
OUT_DIR/<name>.packing.json: {"ids", "lengths": [100, 156], "documents": [{"ids", "nll"}, ...],
"nll_fp32_noise"}: the sequence cut into two documents, each one's per-token NLL scored alone (what
the two packed in one row must give). For the gpt-oss MXFP4 case also
OUT_DIR/<name>.dequantised/model.safetensors: each expert matrix as the reference dequantises it
(bf16); for the other gpt-oss case OUT_DIR/<name>.gradients/model.safetensors and
<name>.gradients.json: float64 gradients of the mean NLL for full fine-tuning and for LoRA on
attention, the adapters, and each one's fp32 noise.
"""
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fp32_noise import fp32_noise, max_abs, relative_norm  # noqa: E402
from beam_reference import beam_search  # noqa: E402
import qwen3_5_reference as qwen3_5  # noqa: E402
import gpt_oss_reference as gpt_oss  # noqa: E402

SEQ_LEN = 160
MARGIN = 1e-4  # top-1 vs top-2 logit gap required at every position (keeps argmax well defined)

BASE = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, rms_norm_eps=1e-5, max_position_embeddings=512,
            hidden_act="silu", initializer_range=0.02)

CASES = {
    # MHA, separate lm_head, fp32 storage, default RoPE.
    "llama_mha_fp32": dict(model_type="llama", num_key_value_heads=4, tie_word_embeddings=False,
                           torch_dtype="float32", rope_theta=10000.0),
    # GQA (8 query heads share 2 KV heads), tied embeddings, bf16 storage.
    "llama_gqa_tied_bf16": dict(model_type="llama", num_attention_heads=8, num_key_value_heads=2,
                                tie_word_embeddings=True, torch_dtype="bfloat16", rope_theta=10000.0),
    # head_dim (24) != hidden/heads (16), attention and MLP biases (o_proj bias too).
    "llama_headdim_bias": dict(model_type="llama", num_key_value_heads=2, head_dim=24,
                               attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                               torch_dtype="float32", rope_theta=10000.0),
    # Llama-3 rope scaling, with a short original context so all three frequency bands occur.
    "llama3_rope": dict(model_type="llama", num_attention_heads=4, num_key_value_heads=1,
                        hidden_size=128, tie_word_embeddings=True, torch_dtype="bfloat16",
                        rope_theta=500000.0,
                        rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64, "rope_type": "llama3"}),
    # Qwen2: q/k/v biases, GQA, tied, sliding window present but off.
    "qwen2_bias": dict(model_type="qwen2", num_attention_heads=4, num_key_value_heads=2,
                       tie_word_embeddings=True, torch_dtype="float32", rope_theta=1000000.0,
                       use_sliding_window=False, sliding_window=32, max_window_layers=2),
    # Sharded checkpoint (index + 4 shards), linear rope scaling, transformers v5 spelling
    # (dtype, rope_parameters).
    "llama_sharded_linear": dict(model_type="llama", num_key_value_heads=2, num_hidden_layers=3,
                                 tie_word_embeddings=False, dtype="float32",
                                 rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 20000.0},
                                 _shards=4),
    # Mistral with a sliding window longer than the sequence, fp16 storage.
    "mistral_fp16": dict(model_type="mistral", num_key_value_heads=2, sliding_window=4096,
                         tie_word_embeddings=False, torch_dtype="float16", rope_theta=1000000.0),
    # Qwen3 (modeling_qwen3.py): per-head q_norm/k_norm over head_dim before RoPE. GQA, tied,
    # bf16 storage, head_dim 32 != hidden/heads, 256 tokens.
    "qwen3_gqa_tied_bf16": dict(model_type="qwen3", num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                tie_word_embeddings=True, torch_dtype="bfloat16", rope_theta=1000000.0,
                                use_sliding_window=False, sliding_window=None, max_window_layers=2,
                                _seq_len=256),
    # Qwen3 with attention_bias (q/k/v/o biases), MHA, untied, fp32, head_dim absent: Qwen3Config's
    # default of 128 applies (not hidden/heads = 16).
    "qwen3_bias_untied_fp32": dict(model_type="qwen3", num_key_value_heads=4, attention_bias=True,
                                   tie_word_embeddings=False, torch_dtype="float32", rope_theta=10000.0,
                                   _seq_len=256),
    # SmolLM3: NoPE every 2nd layer (layers 1 and 3 of 4), tied head and rope_theta 2e6 by
    # default (both keys absent), bf16.
    "smollm3_nope_bf16": dict(model_type="smollm3", num_hidden_layers=4, num_key_value_heads=2,
                              no_rope_layer_interval=2, torch_dtype="bfloat16", _seq_len=256),
    # SmolLM3 with an explicit no_rope_layers list (NoPE first), attention/MLP biases, untied, fp32.
    "smollm3_list_bias_fp32": dict(model_type="smollm3", num_hidden_layers=3, num_key_value_heads=4,
                                   no_rope_layers=[0, 1, 1], attention_bias=True, mlp_bias=True,
                                   tie_word_embeddings=False, torch_dtype="float32", rope_theta=10000.0,
                                   _seq_len=256),
    # Windows shorter than the sequence (transformers' sliding masks: key k visible from query q
    # when q - k < window). Mistral: every layer, 48 of 256; bf16, tied.
    "mistral_window_bf16": dict(model_type="mistral", num_key_value_heads=2, sliding_window=48,
                                tie_word_embeddings=True, torch_dtype="bfloat16", rope_theta=10000.0,
                                _seq_len=256),
    # Qwen2: layers at or past max_window_layers (here 1 of 3) windowed (40), layer 0 global.
    "qwen2_window_layers": dict(model_type="qwen2", num_key_value_heads=2, num_hidden_layers=3,
                                tie_word_embeddings=False, torch_dtype="float32", rope_theta=10000.0,
                                use_sliding_window=True, sliding_window=40, max_window_layers=1, _seq_len=256),
    # Qwen3 with explicit layer_types: layer 0 windowed (64), layer 1 global.
    "qwen3_layer_types": dict(model_type="qwen3", num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                              torch_dtype="bfloat16", rope_theta=1000000.0, use_sliding_window=True,
                              sliding_window=64, layer_types=["sliding_attention", "full_attention"], _seq_len=256),
    # Gemma 2 (modeling_gemma2.py): (1 + w) norms, sandwich norms, sqrt(H)-scaled embeddings,
    # GeGLU, query_pre_attn_scalar (24, head_dim 16). Caps small enough to bend most scores (1.5)
    # and logits (2.0); windows (48) on the even layers by default, 4 layers; tied (Gemma2Config's
    # default: the key absent), bf16.
    "gemma2_caps_window_bf16": dict(model_type="gemma2", num_hidden_layers=4, num_key_value_heads=2, head_dim=16,
                                    hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
                                    query_pre_attn_scalar=24, attn_logit_softcapping=1.5,
                                    final_logit_softcapping=2.0, sliding_window=48, torch_dtype="bfloat16",
                                    rope_theta=10000.0, _seq_len=256),
    # Gemma 2 with its default caps (50, 30: keys absent), explicit layer_types (layer 0 global,
    # 1 and 2 windowed, 64), attention biases, head_dim absent (Gemma2Config: 256), untied, fp32.
    "gemma2_defaults_untied_fp32": dict(model_type="gemma2", num_hidden_layers=3, num_key_value_heads=4,
                                        hidden_act="gelu_pytorch_tanh", attention_bias=True,
                                        layer_types=["full_attention", "sliding_attention", "sliding_attention"],
                                        sliding_window=64, tie_word_embeddings=False, torch_dtype="float32",
                                        _seq_len=256),
    # Gemma 3 text (modeling_gemma3.py): Gemma 2's body without caps, (1 + w) q/k norms, every
    # 2nd layer global (sliding_window_pattern 2 of 4), windows of 40, local RoPE 10000 and global
    # 1e6 with linear scaling (factor 4, as Gemma-3-4B's 8), tied by default, bf16.
    "gemma3_pattern_bf16": dict(model_type="gemma3_text", num_hidden_layers=4, num_key_value_heads=2, head_dim=16,
                                hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16,
                                sliding_window=40, sliding_window_pattern=2, rope_theta=1000000.0,
                                rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0},
                                torch_dtype="bfloat16", _seq_len=256),
    # Gemma 3 in transformers v5's spelling (rope_parameters per layer type, dtype), explicit
    # layer_types, final_logit_softcapping set (2.0, honoured), query_pre_attn_scalar 20, untied, fp32.
    "gemma3_v5_untied_fp32": dict(model_type="gemma3_text", num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                                  hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=20, sliding_window=56,
                                  layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                  rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                                   "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}},
                                  final_logit_softcapping=2.0, tie_word_embeddings=False, dtype="float32",
                                  _seq_len=256),
    # Gemma 3 multimodal checkpoints (Gemma3ForConditionalGeneration, model_type gemma3): the
    # text model's config under text_config, its tensors under language_model.model. (transformers
    # < 4.52; tied here) or model.language_model. with lm_head.weight (later; untied), beside
    # vision tensors ctune must ignore. dtype and eos at the wrapper's top level.
    "gemma3_wrapper_tied_bf16": dict(model_type="gemma3_text", num_hidden_layers=2, num_key_value_heads=2, head_dim=16,
                                     query_pre_attn_scalar=16, sliding_window=48, sliding_window_pattern=2,
                                     torch_dtype="bfloat16", _seq_len=256, _wrapper="language_model.model."),
    "gemma3_wrapper_untied_fp32": dict(model_type="gemma3_text", num_hidden_layers=2, num_key_value_heads=1, head_dim=16,
                                       query_pre_attn_scalar=16, sliding_window=40, sliding_window_pattern=2,
                                       tie_word_embeddings=False, torch_dtype="float32", _seq_len=256,
                                       _wrapper="model.language_model."),
    # Phi-3 / Phi-4-mini (modeling_phi3.py): fused qkv_proj and gate_up_proj, partial rotary
    # (0.75 of head_dim 16: 12 dimensions, 6 factors), longrope with original 128 of 512 positions
    # (factor 4: the long factors apply to these 256 tokens, attention factor
    # sqrt(1 + ln 4 / ln 128)), a window of 64 on every layer, GQA, untied, fp32.
    "phi3_longrope_partial_fp32": dict(model_type="phi3", num_key_value_heads=2, partial_rotary_factor=0.75,
                                       max_position_embeddings=512, original_max_position_embeddings=128,
                                       rope_scaling={"type": "longrope",
                                                     "short_factor": [1.0, 1.1, 1.3, 1.8, 2.5, 3.0],
                                                     "long_factor": [1.2, 1.9, 3.5, 6.0, 9.0, 14.0]},
                                       sliding_window=64, tie_word_embeddings=False, torch_dtype="float32",
                                       rope_theta=10000.0, _seq_len=256),
    # Phi-3 with longrope whose original context (512) these 256 tokens stay inside: the short
    # factors; whole-head rotary, MHA, tied, bf16, no window.
    "phi3_short_tied_bf16": dict(model_type="phi3", num_key_value_heads=4, max_position_embeddings=2048,
                                 original_max_position_embeddings=512,
                                 rope_scaling={"type": "longrope", "short_factor": [1.0] * 4 + [1.5] * 4,
                                               "long_factor": [4.0] * 8},
                                 tie_word_embeddings=True, torch_dtype="bfloat16", rope_theta=10000.0, _seq_len=256),
    # Mixture of experts (modeling_mixtral.py, modeling_qwen3_moe.py): routing must be decisive
    # too (ROUTE_MARGIN between the k-th and (k+1)-th router probability at every token).
    "mixtral_untied_fp32": dict(model_type="mixtral", num_key_value_heads=2, num_local_experts=4,
                                num_experts_per_tok=2, intermediate_size=48, tie_word_embeddings=False,
                                torch_dtype="float32", rope_theta=1e6),
    "mixtral_window_tied_bf16": dict(model_type="mixtral", num_key_value_heads=1, num_local_experts=6,
                                     num_experts_per_tok=3, intermediate_size=32, sliding_window=40,
                                     tie_word_embeddings=True, torch_dtype="bfloat16", router_aux_loss_coef=0.02),
    "qwen3_moe_dense_tied_bf16": dict(model_type="qwen3_moe", num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                                      num_experts=8, num_experts_per_tok=3, moe_intermediate_size=24,
                                      intermediate_size=80, mlp_only_layers=[1], norm_topk_prob=False,
                                      tie_word_embeddings=True, torch_dtype="bfloat16"),
    "qwen3_moe_norm_step_untied_fp32": dict(model_type="qwen3_moe", num_hidden_layers=4, num_key_value_heads=4,
                                            num_experts=16, num_experts_per_tok=4, moe_intermediate_size=16,
                                            decoder_sparse_step=2, norm_topk_prob=True, tie_word_embeddings=False,
                                            torch_dtype="float32", _seq_len=256),
    # transformers v5's layout: each layer's experts stacked as mlp.experts.gate_up_proj
    # [E, 2 I, H] and mlp.experts.down_proj [E, H, I].
    "qwen3_moe_stacked_fp32": dict(model_type="qwen3_moe", num_hidden_layers=2, num_key_value_heads=2,
                                   num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                   norm_topk_prob=True, tie_word_embeddings=False, torch_dtype="float32",
                                   _stacked=True),
    # Qwen3.5 (qwen3_5_reference.py; keys as the released config.json files carry them, on top of
    # its RELEASED). Text layout (Qwen3_5ForCausalLM): three Gated DeltaNet layers then one gated
    # full-attention layer, given as layer_types; each q/k head serves 2 value heads, Dk 16 != Dv
    # 24; partial rotary 0.25 of head_dim 32; untied, fp32.
    "qwen3_5_text_fp32": dict(model_type="qwen3_5_text", architectures=["Qwen3_5ForCausalLM"], num_hidden_layers=4,
                              layer_types=["linear_attention"] * 3 + ["full_attention"], full_attention_interval=4,
                              intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                              linear_value_head_dim=24, linear_conv_kernel_dim=4, tie_word_embeddings=False,
                              dtype="float32",
                              rope_parameters={"mrope_interleaved": True, "mrope_section": [2, 1, 1],
                                               "partial_rotary_factor": 0.25, "rope_theta": 10000000,
                                               "rope_type": "default"},
                              _seq_len=256),
    # The multimodal wrapper the released checkpoints use (Qwen3_5ForConditionalGeneration, as
    # Qwen3.5-0.8B): text config under text_config without layer_types (full_attention_interval 2:
    # layers 1 and 3 full), tensors under model.language_model. beside vision and MTP tensors;
    # Hv = Hk as the 0.8B, MQA, partial rotary 0.5, tied, bf16.
    "qwen3_5_tied_bf16": dict(model_type="qwen3_5_text", num_hidden_layers=4, full_attention_interval=2,
                              intermediate_size=96, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                              linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                              linear_value_head_dim=16, linear_conv_kernel_dim=4, tie_word_embeddings=True,
                              dtype="bfloat16",
                              rope_parameters={"mrope_interleaved": True, "mrope_section": [4, 2, 2],
                                               "partial_rotary_factor": 0.5, "rope_theta": 10000000,
                                               "rope_type": "default"},
                              _seq_len=256, _wrapper="qwen3_5"),
    # Qwen3.5-MoE text (Qwen3_5MoeForCausalLM): every layer routed (8 experts, top 2, always
    # renormalised) plus the sigmoid-gated shared expert, experts stacked as the Hub's
    # checkpoints store them; layer_types (full attention at layer 1) that full_attention_interval
    # (also present, 4) would not give; one q/k head for 2 value heads; conv kernel 3; untied, fp32.
    "qwen3_5_moe_fp32": dict(model_type="qwen3_5_moe_text", architectures=["Qwen3_5MoeForCausalLM"],
                             num_hidden_layers=4, layer_types=["linear_attention", "full_attention", "linear_attention",
                                                               "linear_attention"],
                             full_attention_interval=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=16,
                             linear_value_head_dim=16, linear_conv_kernel_dim=3, num_experts=8, num_experts_per_tok=2,
                             moe_intermediate_size=32, shared_expert_intermediate_size=48, output_router_logits=False,
                             router_aux_loss_coef=0.001, tie_word_embeddings=False, dtype="float32",
                             rope_parameters={"mrope_interleaved": True, "mrope_section": [1, 1, 0],
                                              "partial_rotary_factor": 0.25, "rope_theta": 10000000,
                                              "rope_type": "default"},
                             _seq_len=256),
    # The MoE wrapper as Qwen3.5-35B-A3B is released (Qwen3_5MoeForConditionalGeneration): text
    # config under text_config without layer_types (interval 2), tensors under
    # model.language_model. beside vision and MTP tensors; MQA, Hv = Hk, 4 experts of which 2,
    # a shared expert wider than each, untied, bf16.
    "qwen3_5_moe_wrapper_bf16": dict(model_type="qwen3_5_moe_text", num_hidden_layers=4, full_attention_interval=2,
                                     num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                                     linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                                     linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=4,
                                     num_experts_per_tok=2, moe_intermediate_size=16,
                                     shared_expert_intermediate_size=40, router_aux_loss_coef=0.001,
                                     tie_word_embeddings=False, dtype="bfloat16",
                                     rope_parameters={"mrope_interleaved": True, "mrope_section": [2, 1, 1],
                                                      "partial_rotary_factor": 0.25, "rope_theta": 10000000,
                                                      "rope_type": "default"},
                                     _seq_len=256, _wrapper="qwen3_5"),
    # Qwen3-Next (Qwen3NextForCausalLM, qwen3_5_reference.py): keys as Qwen3-Next-80B-A3B's
    # config.json carries them (v4 spelling: rope_theta and partial_rotary_factor at the top),
    # the DeltaNet's projections fused per key head (in_proj_qkvz, in_proj_ba) with 2 key heads of
    # 2 value heads each and Dk 16 != Dv 24 (so a wrong grouping cannot pass), layers linear /
    # full / linear / full (full_attention_interval 2), sparse MLPs on layers 0, 1 and 3 and a
    # dense one on layer 2 (mlp_only_layers), norm_topk_prob false (Qwen3.5-MoE always
    # renormalises), one module per expert as the release stores them; untied, fp32.
    "qwen3_next_fp32": dict(model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"], num_hidden_layers=4,
                            full_attention_interval=2, decoder_sparse_step=1, mlp_only_layers=[2], intermediate_size=96,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
                            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=24,
                            linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                            shared_expert_intermediate_size=48, norm_topk_prob=False, router_aux_loss_coef=0.001,
                            partial_rotary_factor=0.25, rope_theta=10000000, tie_word_embeddings=False,
                            torch_dtype="float32", _seq_len=256),
    # gpt-oss: 4 layers, sliding (window 48 < 256 tokens) on the even ones by default, sinks, YaRN
    # (factor 8 over an original 64 positions, truncate false: a ramp of fractional bounds), 4
    # experts of 32, 2 per token, swiglu_limit 1 so that both clamps bite; fp32.
    "gpt_oss_fp32": dict(model_type="gpt_oss", num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, swiglu_limit=1.0,
                         rope_scaling=dict(rope_type="yarn", factor=8.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                                           original_max_position_embeddings=64),
                         torch_dtype="float32", _seq_len=256),
    # The release's storage: bf16 with the experts in MXFP4 (quantization_config mxfp4), layer
    # types listed, no rope section (GptOssConfig's default YaRN: factor 32 over 4096), experts
    # of 64 (MXFP4 runs of 32 along both the hidden and the expert width).
    "gpt_oss_mxfp4_bf16": dict(model_type="gpt_oss", num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,
                               intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                               layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention"],
                               torch_dtype="bfloat16", _mxfp4=True, _seq_len=256),
}

# Qwen3.5 and Qwen3-Next cases also get OUT_DIR/<name>.packing.json: the sequence split into two documents at
# PACK_SPLIT (mid-way through the second 64-token chunk), each document's NLL scored alone.
PACK_SPLIT = 100

MOE = ("mixtral", "qwen3_moe", "qwen3_5_moe_text", "qwen3_next")
ROUTE_MARGIN = 1e-5

GEMMA = ("gemma2", "gemma3_text")

# Beam search fixtures: MHA, GQA and Qwen2 biases. The eos ids are tokens greedy decoding picks
# early, so hypotheses do finish and length penalty and early stopping matter.
BEAM_CASES = ("llama_mha_fp32", "llama_gqa_tied_bf16", "qwen2_bias")
BEAM_PROMPTS = ([5, 17, 42], [9, 101, 77, 3, 250, 11, 64, 2], [250, 3])
BEAM_SETTINGS = (
    dict(num_beams=4, length_penalty=1.0, early_stopping=False, max_new_tokens=12),
    dict(num_beams=3, length_penalty=2.0, early_stopping=True, max_new_tokens=12),
    dict(num_beams=4, length_penalty=-1.0, early_stopping="never", max_new_tokens=10),
    dict(num_beams=2, length_penalty=0.5, early_stopping="never", max_new_tokens=12),
    dict(num_beams=3, length_penalty=1.0, early_stopping=False, max_new_tokens=12, repetition=1.3, no_repeat_ngram=2),
    dict(num_beams=5, length_penalty=1.0, early_stopping=False, max_new_tokens=16, eos=False),
)

ST_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.uint8: "U8", torch.float64: "F64"}
TORCH_DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def head_dim(cfg):
    """config.json's head_dim, else the family's default (Qwen3Config: 128), else hidden / heads."""
    if cfg.get("head_dim") is not None:
        return cfg["head_dim"]
    if cfg["model_type"] == "qwen3":
        return 128
    if cfg["model_type"] in GEMMA:  # Gemma2Config / Gemma3TextConfig
        return 256
    return cfg["hidden_size"] // cfg["num_attention_heads"]


def rope_layers(cfg):
    """Per layer, whether RoPE applies: SmolLM3Config's no_rope_layers (1 = RoPE), by default
    NoPE every no_rope_layer_interval-th layer; every other family always."""
    L = cfg["num_hidden_layers"]
    if cfg["model_type"] != "smollm3":
        return [True] * L
    if cfg.get("no_rope_layers") is not None:
        return [bool(v) for v in cfg["no_rope_layers"][:L]]
    interval = cfg.get("no_rope_layer_interval", 4)
    return [(i + 1) % interval != 0 for i in range(L)]


def layer_windows(cfg):
    """Per layer, the attention window or None (global), as the configuration classes decide:
    MistralConfig's sliding_window on every layer; Qwen2Config / Qwen3Config's layer_types
    (given, or sliding from max_window_layers on), with the window only under
    use_sliding_window; Llama none."""
    L = cfg["num_hidden_layers"]
    kind = cfg["model_type"]
    if kind == "mistral":
        return [cfg.get("sliding_window")] * L
    if kind == "phi3":  # Phi3Model: the sliding mask on every layer when sliding_window is set
        return [cfg.get("sliding_window")] * L
    if kind in GEMMA:  # the window always applies on the sliding layers (default 4096)
        window = cfg.get("sliding_window", 4096)
        return [window if t == "sliding_attention" else None for t in gemma_layer_types(cfg)]
    if kind == "mixtral":  # MixtralModel: the sliding mask on every layer when sliding_window is set
        return [cfg.get("sliding_window")] * L
    if kind == "qwen3_moe":  # Qwen3MoeModel: one mask for every layer, sliding under use_sliding_window
        return [cfg.get("sliding_window") if cfg.get("use_sliding_window", False) else None] * L
    if kind in ("qwen2", "qwen3"):
        window = cfg.get("sliding_window") if cfg.get("use_sliding_window", False) else None
        types = cfg.get("layer_types") or [
            "sliding_attention" if window is not None and i >= cfg.get("max_window_layers", 28) else "full_attention"
            for i in range(L)]
        return [window if t == "sliding_attention" else None for t in types]
    return [None] * L


def gemma_layer_types(cfg):
    """Gemma2Config: sliding on even layers; Gemma3TextConfig: global every
    sliding_window_pattern-th (6) layer; layer_types when given."""
    if cfg.get("layer_types"):
        return cfg["layer_types"]
    L = cfg["num_hidden_layers"]
    if cfg["model_type"] == "gemma2":
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
    pattern = cfg.get("sliding_window_pattern", 6)
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(L)]


def moe_layout(cfg):
    """(experts, k, expert intermediate, renormalise, per-layer sparse, module, expert names):
    MixtralConfig's and Qwen3MoeConfig's defaults, Qwen3MoeDecoderLayer's sparse-layer rule."""
    L = cfg["num_hidden_layers"]
    if cfg["model_type"] in ("qwen3_5_moe_text", "qwen3_next"):  # qwen3_5_reference.py's rules
        E, k, I = qwen3_5.moe_layout(cfg)
        return E, k, I, qwen3_5.renormalise(cfg), qwen3_5.sparse_layers(cfg), "mlp", None
    if cfg["model_type"] == "mixtral":
        return (cfg.get("num_local_experts", 8), cfg.get("num_experts_per_tok", 2), cfg["intermediate_size"], True,
                [True] * L, "block_sparse_moe", ("w1", "w3", "w2"))
    E = cfg.get("num_experts", 128)
    step = cfg.get("decoder_sparse_step", 1)
    only = cfg.get("mlp_only_layers") or []
    sparse = [i not in only and E > 0 and (i + 1) % step == 0 for i in range(L)]
    return (E, cfg.get("num_experts_per_tok", 8), cfg.get("moe_intermediate_size", 768), cfg.get("norm_topk_prob", False),
            sparse, "mlp", ("gate_proj", "up_proj", "down_proj"))


def tied(cfg):
    return cfg.get("tie_word_embeddings", cfg["model_type"] in ("smollm3",) + GEMMA)  # their configs tie by default


def config_for(case):
    if case["model_type"] in qwen3_5.TEXT_TYPES:
        return qwen3_5.text_config(case)
    if case["model_type"] in gpt_oss.TYPES:
        return gpt_oss.config(case)
    cfg = dict(BASE)
    cfg.update({k: v for k, v in case.items() if not k.startswith("_")})
    return cfg


def tensor_shapes(cfg):
    """State-dict order and shapes, as HF's LlamaForCausalLM / Qwen2ForCausalLM save them."""
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    d = head_dim(cfg)
    qwen2 = cfg["model_type"] == "qwen2"
    qwen3 = cfg["model_type"] in ("qwen3", "gemma3_text", "qwen3_moe")  # q_norm/k_norm
    phi3 = cfg["model_type"] == "phi3"  # fused qkv_proj, gate_up_proj
    gemma = cfg["model_type"] in GEMMA
    attn_bias = cfg.get("attention_bias", False)
    out = [("model.embed_tokens.weight", (V, H))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if phi3:
            out += [(p + "self_attn.o_proj.weight", (H, nh * d)), (p + "self_attn.qkv_proj.weight", ((nh + 2 * nkv) * d, H)),
                    (p + "mlp.gate_up_proj.weight", (2 * I, H)), (p + "mlp.down_proj.weight", (H, I)),
                    (p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
            continue
        out += [(p + "self_attn.q_proj.weight", (nh * d, H))]
        if qwen2 or attn_bias:
            out += [(p + "self_attn.q_proj.bias", (nh * d,))]
        out += [(p + "self_attn.k_proj.weight", (nkv * d, H))]
        if qwen2 or attn_bias:
            out += [(p + "self_attn.k_proj.bias", (nkv * d,))]
        out += [(p + "self_attn.v_proj.weight", (nkv * d, H))]
        if qwen2 or attn_bias:
            out += [(p + "self_attn.v_proj.bias", (nkv * d,))]
        out += [(p + "self_attn.o_proj.weight", (H, nh * d))]
        if attn_bias and not qwen2:
            out += [(p + "self_attn.o_proj.bias", (H,))]
        if qwen3:
            out += [(p + "self_attn.q_norm.weight", (d,)), (p + "self_attn.k_norm.weight", (d,))]
        if cfg["model_type"] in MOE and moe_layout(cfg)[4][i]:
            E, _, Ie, _, _, module, names = moe_layout(cfg)
            out += [(p + f"{module}.gate.weight", (E, H))]
            for e in range(E):
                for proj, shape in zip(names, ((Ie, H), (Ie, H), (H, Ie))):
                    out += [(p + f"{module}.experts.{e}.{proj}.weight", shape)]
            out += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
            continue
        for proj, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            out += [(p + f"mlp.{proj}.weight", shape)]
            if cfg.get("mlp_bias", False):
                out += [(p + f"mlp.{proj}.bias", (shape[0],))]
        out += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
        if gemma:
            out += [(p + "pre_feedforward_layernorm.weight", (H,)), (p + "post_feedforward_layernorm.weight", (H,))]
    out += [("model.norm.weight", (H,))]
    if not tied(cfg):
        out += [("lm_head.weight", (V, H))]
    return out


def random_weights(cfg, gen, dtype):
    """Weights large enough that logits spread well (std ~1), rounded to the storage dtype."""
    if cfg["model_type"] in qwen3_5.TEXT_TYPES:
        return qwen3_5.random_weights(cfg, gen, dtype)
    if cfg["model_type"] in gpt_oss.TYPES:
        return gpt_oss.random_weights(cfg, gen, dtype, mxfp4="quantization_config" in cfg)
    weights = {}
    offset = 0.0 if cfg["model_type"] in GEMMA else 1.0  # Gemma's norms scale by 1 + w
    for name, shape in tensor_shapes(cfg):
        if name.endswith("norm.weight"):
            t = offset + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=gen)
        else:
            t = 0.125 * torch.randn(shape, generator=gen)
        weights[name] = t.to(dtype)
    return weights


def write_safetensors(path, tensors):
    """Minimal safetensors writer: header JSON padded to 8 bytes, tensors back to back."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        t = t.contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype in (torch.bfloat16, torch.float16) else t.numpy().tobytes()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def wrap(cfg, weights, prefix):
    """The checkpoint as Gemma3ForConditionalGeneration saves it: config.json with text_config
    (dtype, eos and tie at the top), the text tensors under `prefix` (and lm_head beside them:
    language_model.lm_head. in the old spelling, lm_head. in the new), and two vision tensors."""
    text = {k: v for k, v in cfg.items() if k not in ("torch_dtype", "eos_token_id", "tie_word_embeddings")}
    outer = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text,
             "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16}, "torch_dtype": cfg["torch_dtype"],
             "eos_token_id": [1, 106], "mm_tokens_per_image": 256}
    if "tie_word_embeddings" in cfg:
        outer["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    head = "language_model.lm_head.weight" if prefix.startswith("language_model") else "lm_head.weight"
    out = {}
    for name, t in weights.items():
        out[head if name == "lm_head.weight" else prefix + name[len("model."):]] = t
    some = next(iter(weights.values()))
    vision = "vision_tower.vision_model." if prefix.startswith("language_model") else "model.vision_tower.vision_model."
    out[vision + "embeddings.patch_embedding.weight"] = torch.zeros(16, 3, 2, 2, dtype=some.dtype)
    out[vision.replace("vision_tower.vision_model.", "multi_modal_projector.") + "mm_input_projection_weight"] = \
        torch.zeros(16, cfg["hidden_size"], dtype=some.dtype)
    return outer, out


def stack_experts(cfg, weights):
    """transformers v5's expert layout: per sparse layer mlp.experts.gate_up_proj [E, 2 I, H]
    ([gate; up] rows per expert) and mlp.experts.down_proj [E, H, I], no `.weight` suffix."""
    E, _, _, _, sparse, module, (g, u, d) = moe_layout(cfg)
    out = {}
    for name, t in weights.items():
        if ".experts." not in name:
            out[name] = t
            continue
        layer = name.split(".experts.")[0]
        if name.endswith(f".experts.0.{g}.weight"):
            out[layer + ".experts.gate_up_proj"] = torch.stack(
                [torch.cat((weights[f"{layer}.experts.{e}.{g}.weight"], weights[f"{layer}.experts.{e}.{u}.weight"]))
                 for e in range(E)])
            out[layer + ".experts.down_proj"] = torch.stack([weights[f"{layer}.experts.{e}.{d}.weight"] for e in range(E)])
    return out


def write_checkpoint(out_dir, cfg, weights, shards):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    items = list(weights.items())
    if shards <= 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), items)
        return
    per = math.ceil(len(items) / shards)
    weight_map, total = {}, 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        chunk = items[s * per:(s + 1) * per]
        write_safetensors(os.path.join(out_dir, name), chunk)
        for k, t in chunk:
            weight_map[k] = name
            total += t.numel() * t.element_size()
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def inv_freq_hf(cfg, local=False, long=False):
    """RoPE inverse frequencies exactly as transformers' rope init functions (fp32). Gemma 3:
    `local` layers use rope_local_base_freq, unscaled; v5 configs give a section per layer type."""
    d = head_dim(cfg)
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    default_theta = {"smollm3": 2000000.0, "gemma3_text": 1000000.0, "mixtral": 1000000.0}.get(cfg["model_type"], 10000.0)
    if cfg["model_type"] == "gemma3_text":
        if "full_attention" in params or "sliding_attention" in params:
            params = params.get("sliding_attention" if local else "full_attention") or {}
            default_theta = 10000.0 if local else default_theta
        elif local:
            params, default_theta = {}, cfg.get("rope_local_base_freq", 10000.0)
            return 1.0 / (default_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    theta = params.get("rope_theta", cfg.get("rope_theta", default_theta))
    rope_type = params.get("rope_type", params.get("type", "default"))
    d = int(d * cfg.get("partial_rotary_factor", 1.0))  # Phi3: only the leading dimensions rotate
    if rope_type == "longrope":  # _compute_longrope_parameters; `long` decided by the caller
        ext = torch.tensor(params["long_factor" if long else "short_factor"], dtype=torch.float32)
        return 1.0 / (ext * theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if rope_type == "linear":
        return inv / params["factor"]
    if rope_type == "llama3":
        factor, lf, hf = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        old = params["original_max_position_embeddings"]
        low_wl, high_wl = old / lf, old / hf
        wavelen = 2 * math.pi / inv
        out = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old / wavelen - lf) / (hf - lf)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        return torch.where(medium, smoothed, out)
    return inv


def sparse_moe(cfg, W, h, p, stats):
    """The sparse block as Mixtral/Qwen3MoeSparseMoeBlock compute it: softmax over the router's
    logits (fp32 there; here the forward's dtype), top-k, renormalised when the family says, then
    a loop over the experts, each taking the rows routed to it (torch.where on the one-hot mask)
    and adding its weighted output back with index_add_."""
    E, k, _, renorm, _, module, (g, u, d) = moe_layout(cfg)
    probs = torch.softmax(h @ W[p + f"{module}.gate.weight"].T, dim=-1)
    top, idx = torch.topk(probs, k, dim=-1)
    if stats is not None:
        ranked = probs.sort(dim=-1, descending=True).values
        if k < E:
            stats["route_margin"] = min(stats.get("route_margin", 1.0), (ranked[:, k - 1] - ranked[:, k]).min().item())
        stats.setdefault("router_logits", []).append(h @ W[p + f"{module}.gate.weight"].T)
    if renorm:
        top = top / top.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(h)
    mask = torch.nn.functional.one_hot(idx, num_classes=E).permute(2, 1, 0)  # [E, k, T]
    for e in range(E):
        slot, rows = torch.where(mask[e])
        if rows.numel() == 0:
            continue
        x = h[rows]
        ex = p + f"{module}.experts.{e}."
        y = (torch.nn.functional.silu(x @ W[ex + g + ".weight"].T) * (x @ W[ex + u + ".weight"].T)) @ W[ex + d + ".weight"].T
        out.index_add_(0, rows, y * top[rows, slot, None])
    return out


def forward(cfg, w, ids, dtype=torch.float64, stats=None):
    """Logits [T, V] in `dtype` (float64; float32 for the noise runs) for one sequence. `stats`,
    when given, receives the MoE routing's smallest k-th/(k+1)-th probability gap and each sparse
    layer's router logits."""
    if cfg["model_type"] in qwen3_5.TEXT_TYPES:
        return qwen3_5.forward(cfg, w, ids, dtype, stats)
    if cfg["model_type"] in gpt_oss.TYPES:
        return gpt_oss.forward(cfg, w, ids, dtype, stats)
    W = {k: v.to(dtype) for k, v in w.items()}
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    d = head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    gemma = cfg["model_type"] in GEMMA
    # Gemma: queries scaled by query_pre_attn_scalar^-0.5 (default 256), soft-caps
    # cap * tanh(x / cap): Gemma2Config's defaults 50 / 30; Gemma 3 none on attention.
    scale = cfg.get("query_pre_attn_scalar", 256) ** -0.5 if gemma else 1 / math.sqrt(d)
    attn_cap = cfg.get("attn_logit_softcapping", 50.0) if cfg["model_type"] == "gemma2" else None
    final_cap = cfg.get("final_logit_softcapping", 30.0 if cfg["model_type"] == "gemma2" else None) if gemma else None

    def cap(x, c):
        return x if c is None else c * torch.tanh(x / c)

    def rms(x, weight):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return n * (1.0 + weight) if gemma else weight * n

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        return y + W[name + ".bias"] if name + ".bias" in W else y

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def rope(x, cos, sin):  # the leading cos.shape[-1] dimensions rotate, the rest pass
        r = cos.shape[-1]
        return torch.cat((x[..., :r] * cos + rotate_half(x[..., :r]) * sin, x[..., r:]), dim=-1)

    pos = torch.arange(T, dtype=torch.float32)

    # longrope: the long factors once the largest position reaches the original context
    # (_longrope_frequency_update), cos and sin times the attention factor.
    scaling = cfg.get("rope_scaling") or {}
    long = False
    attention_factor = 1.0
    if scaling.get("type", scaling.get("rope_type")) == "longrope":
        original = cfg["original_max_position_embeddings"]
        long = T > original
        factor = cfg["max_position_embeddings"] / original
        attention_factor = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0

    def cos_sin(inv):
        freqs = torch.outer(pos, inv)                      # fp32, as HF (autocast off)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * attention_factor).to(dtype), (emb.sin() * attention_factor).to(dtype)   # [T, rotary dim]
    tables = {False: cos_sin(inv_freq_hf(cfg, long=long)), True: cos_sin(inv_freq_hf(cfg, local=True))}
    local_layers = ([t == "sliding_attention" for t in gemma_layer_types(cfg)] if cfg["model_type"] == "gemma3_text"
                    else [False] * cfg["num_hidden_layers"])
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    q_idx, k_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    windows = layer_windows(cfg)
    rotary = rope_layers(cfg)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    if gemma:
        x = x * H ** 0.5
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        cos, sin = tables[local_layers[i]]
        h = rms(x, W[p + "input_layernorm.weight"])
        if p + "self_attn.qkv_proj.weight" in W:           # Phi3: [q; k; v] rows
            qkv = lin(h, p + "self_attn.qkv_proj")
            q, k, v = qkv.split([nh * d, nkv * d, nkv * d], dim=-1)
            q, k, v = (t.reshape(T, -1, d).transpose(0, 1) for t in (q, k, v))
        else:
            q = lin(h, p + "self_attn.q_proj").view(T, nh, d).transpose(0, 1)
            k = lin(h, p + "self_attn.k_proj").view(T, nkv, d).transpose(0, 1)
            v = lin(h, p + "self_attn.v_proj").view(T, nkv, d).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in W:             # Qwen3: each head normalised over d, before RoPE
            q = rms(q, W[p + "self_attn.q_norm.weight"])
            k = rms(k, W[p + "self_attn.k_norm.weight"])
        if rotary[i]:                                      # SmolLM3's NoPE layers skip it
            q = rope(q, cos, sin)
            k = rope(k, cos, sin)
        k = k.repeat_interleave(nh // nkv, dim=0)          # query head j uses KV head j // groups
        v = v.repeat_interleave(nh // nkv, dim=0)
        s = cap((q @ k.transpose(1, 2)) * scale, attn_cap)
        allowed = causal if windows[i] is None else causal & (q_idx - k_idx < windows[i])
        s = s.masked_fill(~allowed, float("-inf"))
        a = torch.softmax(s, dim=-1) @ v                   # [nh, T, d]
        o = lin(a.transpose(0, 1).reshape(T, nh * d), p + "self_attn.o_proj")
        if gemma:                                          # sandwich norms, GeGLU (tanh GELU)
            x = x + rms(o, W[p + "post_attention_layernorm.weight"])
            h = rms(x, W[p + "pre_feedforward_layernorm.weight"])
            g = torch.nn.functional.gelu(lin(h, p + "mlp.gate_proj"), approximate="tanh")
            x = x + rms(lin(g * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj"), W[p + "post_feedforward_layernorm.weight"])
            continue
        x = x + o
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        if cfg["model_type"] in MOE and moe_layout(cfg)[4][i]:
            x = x + sparse_moe(cfg, W, h, p, stats)
            continue
        if p + "mlp.gate_up_proj.weight" in W:             # Phi3: [gate; up] rows
            g, u = lin(h, p + "mlp.gate_up_proj").chunk(2, dim=-1)
        else:
            g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        x = x + lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj")
    x = rms(x, W["model.norm.weight"])
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    return cap(x @ head.T, final_cap)


def load_balancing_loss(gate_logits, num_experts, top_k, mask):
    """transformers' load_balancing_loss_func (Switch Transformer eqs. 4-6) for one sequence:
    over the router logits of every sparse layer concatenated, the fraction of masked tokens
    routed to each expert (per top-k slot) times the mean masked router probability, summed,
    times the expert count."""
    logits = torch.cat(gate_logits, dim=0)                         # [L T, E]
    probs = torch.softmax(logits, dim=-1)
    _, chosen = torch.topk(probs, top_k, dim=-1)
    expert_mask = torch.nn.functional.one_hot(chosen, num_experts).to(probs.dtype)  # [L T, k, E]
    m = mask.to(probs.dtype).repeat(len(gate_logits))             # the attention mask per layer
    tokens_per_expert = (expert_mask * m[:, None, None]).sum(0) / m.sum()
    prob_per_expert = (probs * m[:, None]).sum(0) / m.sum()
    return (tokens_per_expert * prob_per_expert[None]).sum() * num_experts


def aux_reference(cfg, weights, ids):
    """The aux loss and the router z-loss over a mask (a 30-token prompt and the last position
    excluded, as the main loss excludes them) and their gradients with respect to each sparse
    layer's router weight (float64 autograd), with the float32 noise of each."""
    E, k, _, _, sparse, module, _ = moe_layout(cfg)
    mask = torch.tensor([0.0] * 30 + [1.0] * (len(ids) - 31) + [0.0])
    gates = [f"model.layers.{i}.{module}.gate.weight" for i in range(cfg["num_hidden_layers"]) if sparse[i]]

    def compute(t, loss):
        t = {n: (v.clone().requires_grad_(True) if n in gates else v) for n, v in t.items()}
        stats = {}
        forward(cfg, t, ids, torch.get_default_dtype(), stats=stats)
        value = loss(stats["router_logits"], mask.to(torch.get_default_dtype()))
        grads = torch.autograd.grad(value, [t[g] for g in gates])
        return {"loss": value, **{g: gr for g, gr in zip(gates, grads)}}
    w64 = {n: v.to(torch.float64) for n, v in weights.items()}
    out = {"aux_mask": mask.tolist()}
    for name, loss in (("aux", lambda logits, m: load_balancing_loss(logits, E, k, m)), ("z", router_z_loss)):
        exact = compute(w64, loss)
        noise = fp32_noise(lambda t, loss=loss: compute(t, loss), w64, relative_norm)
        out.update({f"{name}_loss": exact["loss"].item(), f"{name}_loss_fp32_noise": noise["loss"],
                    f"{name}_grads": {g: exact[g].flatten().tolist() for g in gates},
                    f"{name}_grads_fp32_noise": {g: noise[g] for g in gates}})
    return out


def router_z_loss(gate_logits, mask):
    """transformers' router_z_loss_func (Switch Transformers, ST-MoE): the mean over tokens of
    logsumexp(router logits)^2; here over every sparse layer's logits at once and over the
    masked tokens, as the load-balancing loss (transformers' takes every token)."""
    logits = torch.cat(gate_logits, dim=0)
    m = mask.reshape(-1).to(logits.dtype).repeat(len(gate_logits))
    return (torch.logsumexp(logits, dim=-1) ** 2 * m).sum() / m.sum()


def write_beam_fixture(path, cfg, weights):
    def logprobs(seq):
        return torch.log_softmax(forward(cfg, weights, seq)[-1], dim=-1)

    def greedy(prompt, n):
        seq = list(prompt)
        for _ in range(n):
            seq.append(int(logprobs(seq).argmax()))
        return seq[len(prompt):]

    eos = sorted({greedy(p, 3)[2] for p in BEAM_PROMPTS})
    runs = []
    for setting in BEAM_SETTINGS:
        s = dict(setting)
        eos_ids = eos if s.pop("eos", True) else []
        outs = [beam_search(logprobs, p, eos_ids=eos_ids, **s) for p in BEAM_PROMPTS]
        runs.append(dict(setting, eos_ids=eos_ids, prompts=BEAM_PROMPTS, outputs=outs))
    with open(path, "w") as f:
        json.dump(runs, f)


def main():
    out_root = sys.argv[1]
    os.makedirs(out_root, exist_ok=True)
    threads = max(1, os.cpu_count() or 1)
    wanted = set(sys.argv[2:])
    for seed, (name, case) in enumerate(CASES.items()):
        if wanted and name not in wanted:
            continue
        cfg = config_for(case)
        # Qwen3.5's per-token recurrence is thousands of tiny ops, forward and backward (the MoE
        # aux-loss gradients): one intra-op thread, as more only spin (qwen3_5_reference.forward).
        torch.set_num_threads(1 if cfg["model_type"] in qwen3_5.TEXT_TYPES else threads)
        dtype = TORCH_DTYPE[cfg.get("torch_dtype", cfg.get("dtype"))]
        gen = torch.Generator().manual_seed(1000 + seed)
        weights = random_weights(cfg, gen, dtype)
        # Draw token sequences until every position has a decisive argmax.
        seq_len = case.get("_seq_len", SEQ_LEN)
        for attempt in range(50):
            ids = torch.randint(0, cfg["vocab_size"], (seq_len,), generator=gen).tolist()
            stats = {}
            logits = forward(cfg, weights, ids, stats=stats)
            top2 = logits.topk(2, dim=-1).values
            margin = (top2[:, 0] - top2[:, 1]).min().item()
            if margin > MARGIN and stats.get("route_margin", 1.0) > ROUTE_MARGIN:
                break
        else:
            raise SystemExit(f"{name}: no sequence with a decisive argmax")
        logp = torch.log_softmax(logits, dim=-1)
        nll = [-logp[t, ids[t + 1]].item() for t in range(seq_len - 1)]

        def nll_of(t):
            lp = torch.log_softmax(forward(cfg, t, ids, torch.get_default_dtype()), dim=-1)
            return {"nll": -lp[torch.arange(seq_len - 1), torch.tensor(ids[1:])]}
        noise = fp32_noise(nll_of, {k: v.to(torch.float64) for k, v in weights.items()}, max_abs)["nll"]
        if case.get("_wrapper") == "qwen3_5":
            write_checkpoint(os.path.join(out_root, name), *qwen3_5.wrap(cfg, weights), 1)
        elif case.get("_wrapper"):
            write_checkpoint(os.path.join(out_root, name), *wrap(cfg, weights, case["_wrapper"]), 1)
        elif cfg["model_type"] in gpt_oss.TYPES:
            write_checkpoint(os.path.join(out_root, name), cfg, gpt_oss.stored_tensors(weights), 1)
            if gpt_oss.PACKED:
                os.makedirs(os.path.join(out_root, name + ".dequantised"), exist_ok=True)
                write_safetensors(os.path.join(out_root, name + ".dequantised", "model.safetensors"),
                                  [(n[:-len("_blocks")], weights[n[:-len("_blocks")]]) for n in gpt_oss.PACKED if n.endswith("_blocks")])
            else:
                tensors, info = gpt_oss.gradient_reference(cfg, weights, ids, gen, fp32_noise, relative_norm)
                os.makedirs(os.path.join(out_root, name + ".gradients"), exist_ok=True)
                write_safetensors(os.path.join(out_root, name + ".gradients", "model.safetensors"), tensors)
                with open(os.path.join(out_root, name + ".gradients.json"), "w") as f:
                    json.dump(info, f)
        elif case.get("_stacked"):
            write_checkpoint(os.path.join(out_root, name), cfg, stack_experts(cfg, weights), 1)
        else:
            write_checkpoint(os.path.join(out_root, name), cfg, weights, case.get("_shards", 1))
        reference = {"ids": ids, "nll": nll, "argmax": logits.argmax(-1).tolist(), "min_margin": margin,
                     "nll_fp32_noise": noise}
        if cfg["model_type"] in MOE:
            reference.update(aux_reference(cfg, weights, ids))
        with open(os.path.join(out_root, name + ".reference.json"), "w") as f:
            json.dump(reference, f)
        if cfg["model_type"] in qwen3_5.TEXT_TYPES:
            packing = qwen3_5.packing_reference(cfg, weights, ids, PACK_SPLIT, fp32_noise, max_abs)
            with open(os.path.join(out_root, name + ".packing.json"), "w") as f:
                json.dump(packing, f)
        if name in BEAM_CASES:
            write_beam_fixture(os.path.join(out_root, name + ".beam.json"), cfg, weights)
        print(f"{name}: {len(weights)} tensors, {dtype}, mean nll {sum(nll) / len(nll):.4f}, min margin {margin:.2e}, "
              f"fp32 noise {noise:.2e}")


if __name__ == "__main__":
    main()
