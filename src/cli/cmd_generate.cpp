// `ctune generate --model DIR [--adapter DIR] --prompt TEXT`: continue a text with the KV-cache
// decoder; greedy by default, sampling with the usual controls.
#include <ATen/Parallel.h>

#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "infer/generate.h"
#include "model/weights.h"
#include "peft/model_spec.h"
#include "tokenizer/tokenizer.h"

namespace ctune::cli {

namespace {

struct GenerateCliOptions {
  std::string model_dir, adapter, tokenizer_dir, prompt, dtype = "fp32";
  infer::GenerateOptions g;
  bool no_special = false;
};

int run_generate(GenerateCliOptions o) {
  auto tokenizer = tok::load_tokenizer(o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir);
  peft::ModelSpec spec;
  spec.weights = o.model_dir;
  spec.storage_dtype = model::parse_dtype(o.dtype, "--dtype");  // and computed in as stored
  spec.adapter = o.adapter;
  auto lm = peft::build_model(spec);
  std::vector<std::int64_t> prompt;
  for (auto id : tokenizer->encode(o.prompt, !o.no_special)) prompt.push_back(id);
  const auto length = static_cast<std::int64_t>(prompt.size()) + o.g.max_new_tokens;
  if (length > lm->config().max_position_embeddings) {
    spdlog::warn("prompt ({} tokens) + --max-new-tokens ({}) is past the model's max_position_embeddings {}: "
                 "positions beyond it were never trained",
                 prompt.size(), o.g.max_new_tokens, lm->config().max_position_embeddings);
  }
  if (tokenizer->special().eos) o.g.stop_ids.push_back(*tokenizer->special().eos);
  for (auto id : lm->config().eos_token_ids) o.g.stop_ids.push_back(id);
  auto out = infer::generate(lm, prompt, o.g);
  std::cout << tokenizer->decode(std::vector<std::int32_t>(out.begin(), out.end()), true) << std::endl;
  return 0;
}

}  // namespace

CLI::App* add_generate_command(CLI::App& app, Action& run) {
  auto o = std::make_shared<GenerateCliOptions>();
  auto* cmd = app.add_subcommand("generate", "Continue a prompt (greedy, or sampled with --sample)");
  cmd->add_option("--model", o->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--adapter", o->adapter, "PEFT LoRA adapter directory");
  cmd->add_option("--tokenizer", o->tokenizer_dir, "Tokenizer directory (default: the model directory)");
  cmd->add_option("--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("--max-new-tokens", o->g.max_new_tokens, "Tokens to generate at most")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--sample", o->g.sampling.do_sample, "Sample instead of greedy decoding");
  cmd->add_option("--temperature", o->g.sampling.temperature, "Sampling temperature (> 0)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", o->g.sampling.top_k, "Keep the k most likely tokens (0: off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->g.sampling.top_p, "Nucleus sampling mass in (0, 1]")->check(CLI::Range(1e-9, 1.0));
  cmd->add_option("--repetition-penalty", o->g.sampling.repetition_penalty, "CTRL repetition penalty (1: off)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--no-repeat-ngram", o->g.sampling.no_repeat_ngram_size, "Ban repeating n-grams of this size")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->g.seed, "Sampling seed");
  cmd->add_option("--dtype", o->dtype, "Compute dtype: fp32, bf16 or fp16");
  cmd->add_flag("--no-special", o->no_special, "Do not add BOS to the prompt");
  cmd->callback([o, &run] { run = [o] { return run_generate(*o); }; });
  return cmd;
}

}  // namespace ctune::cli
