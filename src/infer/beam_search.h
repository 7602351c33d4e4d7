// Beam search as Hugging Face's generate does it with num_beams > 1 and do_sample off
// (docs/formats.md "Beam search"): at each step every beam's next-token log-probabilities,
// after the penalty processors, are added to the beam's running sum; the best 2 x num_beams
// (more with several eos ids) continuations of each prompt are walked in order: an eos among the
// first num_beams becomes a finished hypothesis scored sum / generated_len^length_penalty, the
// others fill the next num_beams beams. The num_beams best finished hypotheses are kept; the
// prompt is done when early_stopping says so; at max_new_tokens the running beams join the
// hypotheses and the best one is returned.
#pragma once

#include "infer/generation_types.h"
#include "model/decoder.h"

namespace ctune::infer {

// Every prompt's best hypothesis (stop_reason "eos" or "length", score set). All prompts run
// together: num_beams rows per prompt in one left-padded batch and one KV cache, whose rows
// follow their beams after each step.
std::vector<Generation> beam_search(model::CausalLM& model, const std::vector<std::vector<std::int64_t>>& prompts,
                                    const GenerateOptions& options, GenerateStats* stats = nullptr);

}  // namespace ctune::infer
