// Generation over many prompts, as `ctune generate` runs it: `batch` prompts at a time (one
// left-padded batch each, infer/generate.h), a progress line over all of them, and text stop
// strings applied to the decoded text. The command only prints what it is handed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "infer/generate.h"

namespace ctune::infer {

// The longest prefix of `text` that ends on a whole UTF-8 character and before any stop string;
// `stopped` tells whether a stop string was found.
std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops, bool* stopped);

struct BatchedGeneration {
  GenerateOptions options;
  std::size_t batch = 1;
  std::vector<std::string> stops;                                       // text stop strings
  std::function<std::string(const std::vector<std::int64_t>&)> decode;  // ids -> text
  bool progress = true;  // a live line over the prompts (when there are several)
};

// One prompt's result: its text cut before a stop string (stop_reason "stop_string" then).
struct PromptResult {
  std::size_t prompt = 0;  // index into the prompts
  Generation generation;
  std::string text;
  std::size_t batch_rows = 0;  // the batch it ran in
  const GenerateStats* stats = nullptr;  // that batch's timings
};

// `on_text(prompt, text so far)` follows each prompt's growing text (cut before stop strings and
// held back at an incomplete character), for streaming; `done` receives each result in prompt
// order, batch by batch.
void generate_in_batches(model::CausalLM& model, const std::vector<std::vector<std::int64_t>>& prompts, const BatchedGeneration& g,
                         const std::function<void(std::size_t, const std::string&)>& on_text,
                         const std::function<void(const PromptResult&)>& done);

}  // namespace ctune::infer
