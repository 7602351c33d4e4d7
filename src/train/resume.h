// Resuming a run: which recipe changes keep it the same run (logging, evaluation cadence,
// checkpoint cadence, a longer max_steps) and which do not (model, tokenizer, data, LoRA rank or
// targets, batch geometry, optimizer, schedule shape), and cutting metrics.jsonl back to the
// checkpoint so the resumed run appends where the checkpoint left off.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/recipe.h"

namespace ctune::train {

// Throws ConfigError naming the first incompatible key (saved vs now); returns one note per
// harmless change.
std::vector<std::string> check_resume_compatible(const Recipe& saved, const Recipe& now, std::int64_t checkpoint_step);

// Keeps the lines of dir/metrics.jsonl whose "step" is <= step (rewritten atomically).
void truncate_metrics(const std::filesystem::path& dir, std::int64_t step);

}  // namespace ctune::train
