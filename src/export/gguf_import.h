// Reading exported GGUF files back into ctune models, for the self-check: a GGUF model becomes
// a fp32 CausalLM (Q/K permutation undone for llama, F16/BF16/Q8_0 dequantized, rope_freqs
// applied to the rotary frequencies), and a GGUF LoRA adapter is folded into a model's weights
// the way llama.cpp applies it (scale = alpha / rank, B rows un-permuted for llama q/k).
#pragma once

#include "io/gguf.h"
#include "model/decoder.h"

namespace ctune::exporter {

// FormatError for a missing, unexpected or wrongly shaped tensor (named with the file).
model::CausalLM load_gguf_model(const io::GgufFile& file);

// W += (alpha / rank) * B A for every lora_a/lora_b pair, in fp32. FormatError when the file is
// not a LoRA adapter for this model's architecture or a pair does not fit its layer.
// Returns the number of layers changed.
std::size_t apply_gguf_lora(model::CausalLM& model, const io::GgufFile& adapter);

}  // namespace ctune::exporter
