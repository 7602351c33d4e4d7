// `ctune generate --model DIR [--adapter DIR] (--prompt T | --prompt-file F) [controls]`: continue
// prompts with the KV-cache decoder, several at a time (left-padded batches of --batch-size).
// Greedy by default and with --temperature 0; a positive temperature, --top-k, --top-p or
// --sample sample with Hugging Face generate's processors in its order (docs/formats.md
// "Sampling"); --num-beams > 1 runs beam search. --json prints one object per prompt; --stream
// prints text as it is generated. --chat wraps each prompt as a user turn in the model's chat
// format (docs/formats.md "Chat prompts"); on a terminal with no prompt it is an interactive chat.
#include <ATen/Parallel.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/quant_names.h"
#include "core/regular_file.h"
#include "infer/batched.h"
#include "infer/generate.h"
#include "model/weights.h"
#include "ops/memory.h"
#include "ops/tensor_pool.h"
#include "peft/model_spec.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "train/observe/metrics.h"

namespace ctune::cli {

namespace {

struct GenerateCliOptions {
  std::string model_dir, adapter, tokenizer_dir, prompt, prompt_file, dtype = "fp32", quantize = "none";
  infer::GenerateOptions g;
  std::vector<std::string> stop;
  std::string early_stopping = "false";
  std::int64_t batch_size = 8;
  bool sample = false, json = false, stream = false, no_special = false;
  bool chat = false;  // prompts are user turns in the model's chat format
  std::string system, chat_format = "auto";
  // Given on the command line (CLI11 leaves the defaults otherwise).
  bool temperature_set = false, top_k_set = false, top_p_set = false;
};

// --prompt, or --prompt-file: a .jsonl file of {"prompt": "..."} objects, or else one prompt per
// non-empty line.
std::vector<std::string> read_prompts(const GenerateCliOptions& o) {
  if (o.prompt_file.empty()) return {o.prompt};
  require_regular_file(o.prompt_file, "a prompt file");
  std::ifstream in(o.prompt_file);
  if (!in) throw IoError(o.prompt_file + ": cannot read the prompt file");
  const bool jsonl = o.prompt_file.size() > 6 && o.prompt_file.compare(o.prompt_file.size() - 6, 6, ".jsonl") == 0;
  std::vector<std::string> prompts;
  std::int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    if (!jsonl) {
      prompts.push_back(line);
      continue;
    }
    const auto where = o.prompt_file + ":" + std::to_string(line_no);
    const Json j = parse_json(line, where);
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
      throw FormatError(where + ": expected an object with a string \"prompt\"");
    }
    prompts.push_back(j["prompt"].get<std::string>());
  }
  if (prompts.empty()) throw FormatError(o.prompt_file + ": no prompts");
  return prompts;
}

// The sampling controls as Hugging Face generate reads them, from the flags; throws ConfigError
// for values it would reject.
void resolve_sampling(GenerateCliOptions& o) {
  auto& s = o.g.sampling;
  // Written as negations, so that NaN fails them too.
  if (!(s.temperature >= 0 && std::isfinite(s.temperature)))
    throw ConfigError("--temperature: expected >= 0 (0: greedy) and finite, found " + std::to_string(s.temperature));
  if (!(s.top_p >= 0 && s.top_p <= 1)) throw ConfigError("--top-p: expected a probability in [0, 1], found " + std::to_string(s.top_p));
  for (const auto& stop : o.stop)
    if (stop.empty()) throw ConfigError("--stop: expected a non-empty text (an empty stop string would match before any token)");
  if (s.top_k < 0) throw ConfigError("--top-k: expected >= 0 (0: off), found " + std::to_string(s.top_k));
  if (!(s.repetition_penalty > 0)) {
    throw ConfigError("--repetition-penalty: expected > 0 (1: off), found " + std::to_string(s.repetition_penalty));
  }
  if (s.no_repeat_ngram_size < 0) throw ConfigError("--no-repeat-ngram-size: expected >= 0, found " + std::to_string(s.no_repeat_ngram_size));
  if (o.batch_size < 1) throw ConfigError("--batch-size: expected >= 1, found " + std::to_string(o.batch_size));
  if (o.g.num_beams < 1) throw ConfigError("--num-beams: expected >= 1, found " + std::to_string(o.g.num_beams));
  if (o.early_stopping == "true") {
    o.g.early_stopping = infer::EarlyStopping::first;
  } else if (o.early_stopping == "never") {
    o.g.early_stopping = infer::EarlyStopping::never;
  } else if (o.early_stopping != "false") {
    throw ConfigError("--early-stopping: expected true, false or never, found '" + o.early_stopping + "'");
  }
  if (o.g.num_beams > 1 && o.stream) {
    throw ConfigError("--stream with --num-beams > 1: beam search settles the text only at the end; drop one of them");
  }
  // --temperature 0 is greedy whatever else is set (as llama.cpp); otherwise any sampling
  // control, or --sample, samples.
  s.do_sample = (o.sample || o.temperature_set || o.top_k_set || o.top_p_set) && !(o.temperature_set && s.temperature == 0);
  if (!s.do_sample) s.temperature = 1.0;
}

// An interactive chat on a terminal: each line is a user turn; the reply streams as it is
// generated and joins the conversation. /reset starts over, /exit (or end of input) ends.
int chat_loop(model::CausalLM& lm, const ChatPrompt& chat, const GenerateCliOptions& o,
              const std::function<std::string(const std::vector<std::int64_t>&)>& decode) {
  data::Conversation start;
  if (!o.system.empty()) start.push_back({data::Role::system, o.system});
  data::Conversation conv = start;
  std::cerr << "chat (" << chat.format_name() << " format): type a message; /reset starts over, /exit ends" << std::endl;
  for (std::string line;;) {
    std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      conv = start;
      continue;
    }
    conv.push_back({data::Role::user, line});
    std::string shown;
    auto on_token = [&](std::size_t, const std::vector<std::int64_t>& ids) {
      bool stopped = false;
      const auto text = infer::cut_at_stop(decode(ids), o.stop, &stopped);
      if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) std::cout << text.substr(shown.size()) << std::flush;
      shown = text;
      return !stopped;
    };
    try {
      infer::generate(lm, {chat.ids(conv)}, o.g, nullptr, on_token);
    } catch (const ConfigError& e) {  // the conversation outgrew the context: say so, keep chatting
      std::cout << "\n[" << e.what() << "; /reset to start over]" << std::endl;
      conv.pop_back();
      continue;
    }
    std::cout << std::endl;
    conv.push_back({data::Role::assistant, shown});
  }
  return 0;
}

int run_generate(GenerateCliOptions o) {
  // Training's allocator (ops/tensor_pool.h): without it every prefill maps fresh pages, and a
  // batch of 128 quickstart prompts took 3.5x as long to generate as inside a GRPO step.
  ops::use_tensor_pool();
  at::globalContext().setFlushDenormal(true);  // as training does: a GRPO step samples what generate samples
  resolve_sampling(o);
  const bool interactive = o.chat && o.prompt.empty() && o.prompt_file.empty() && isatty(STDIN_FILENO);
  if (!interactive && o.prompt.empty() == o.prompt_file.empty()) {
    throw ConfigError(o.chat ? "--chat: give --prompt or --prompt-file, or run it on a terminal to chat"
                             : "give one of --prompt and --prompt-file");
  }
  if (interactive && o.g.num_beams > 1) throw ConfigError("--chat on a terminal streams its replies: not with --num-beams > 1");
  if (!o.chat && (!o.system.empty() || o.chat_format != "auto")) throw ConfigError("--system and --chat-format need --chat");
  const auto texts = interactive ? std::vector<std::string>{} : read_prompts(o);
  const auto tokenizer_dir = o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir;
  auto tokenizer = tok::load_tokenizer(tokenizer_dir);
  peft::ModelSpec spec;
  spec.weights = o.model_dir;
  spec.storage_dtype = model::parse_dtype(o.dtype, "--dtype");  // and computed in as stored
  spec.adapter = o.adapter;
  if (o.quantize != kQuantNone) {  // the projections quantised as a QLoRA base is (recipe defaults)
    quant::QuantSpec q;
    q.kind = quant::parse_quant_kind(o.quantize);
    spec.quantize_base = q;
  }
  auto lm = peft::build_model(spec);
  o.g.stop_ids = model::generation_stop_ids(lm->config(), o.model_dir);
  auto add_stop = [&](std::int64_t id) {
    if (std::find(o.g.stop_ids.begin(), o.g.stop_ids.end(), id) == o.g.stop_ids.end()) o.g.stop_ids.push_back(id);
  };
  if (tokenizer->special().eos) add_stop(*tokenizer->special().eos);
  std::optional<ChatPrompt> chat;
  if (o.chat) {
    chat.emplace(*tokenizer, tokenizer_dir, o.chat_format);
    for (const auto eot : chat->end_of_turn_ids()) add_stop(eot);  // the assistant's turn ends there
  }
  auto decode = [&](const std::vector<std::int64_t>& ids) { return tok::decode_generated(*tokenizer, ids); };
  if (interactive) return chat_loop(lm, *chat, o, decode);
  std::vector<std::vector<std::int64_t>> prompts;
  for (const auto& t : texts) {
    if (chat) {  // one user turn (after the --system message) and the assistant header
      data::Conversation conv;
      if (!o.system.empty()) conv.push_back({data::Role::system, o.system});
      conv.push_back({data::Role::user, t});
      prompts.push_back(chat->ids(conv));
      continue;
    }
    const auto ids = tokenizer->encode(t, !o.no_special);
    prompts.emplace_back(ids.begin(), ids.end());
  }
  // The peak is generation's, not loading's, measured where the model lives (ops/memory.h).
  const at::Device device = lm->parameters().front().device();
  ops::reset_peak_memory(device);
  // Streaming prints one sequence at a time, as it grows. Many prompts have a progress line
  // (core/progress.h); the results are printed above it.
  infer::BatchedGeneration batched{o.g, o.stream ? 1 : static_cast<std::size_t>(o.batch_size), o.stop, decode, !o.stream};
  auto print = [](const std::string& line) { print_above([&] { std::cout << line << std::endl; }); };
  std::vector<std::string> shown(prompts.size());  // what streaming has printed of each
  auto on_text = [&](std::size_t i, const std::string& text) {
    if (text.size() > shown[i].size() && text.compare(0, shown[i].size(), shown[i]) == 0) std::cout << text.substr(shown[i].size()) << std::flush;
    shown[i] = text;
  };
  infer::generate_in_batches(lm, prompts, batched, o.stream ? std::function<void(std::size_t, const std::string&)>(on_text) : nullptr,
                             [&](const infer::PromptResult& r) {
    const auto& out = r.generation;
    if (o.json) {
      nlohmann::ordered_json j = {{"prompt", texts[r.prompt]},
                                  {"prompt_ids", prompts[r.prompt]},
                                  {"generated_ids", out.ids},
                                  {"text", r.text},
                                  {"stop_reason", out.stop_reason},
                                  {"batch", r.batch_rows},
                                  {"prefill_tokens_per_s", r.stats->prefill_tokens / std::max(1e-9, r.stats->prefill_s)},
                                  {"decode_tokens_per_s", r.stats->decode_tokens / std::max(1e-9, r.stats->decode_s)},
                                  {"prefill_s", r.stats->prefill_s},
                                  {"decode_s", r.stats->decode_s},
                                  {"peak_memory_bytes", ops::peak_memory(device)}};
      if (o.g.num_beams > 1) j["beam_score"] = out.score;
      // Invalid UTF-8 in a prompt or a cut token is shown as U+FFFD, as the decoder shows it.
      print(j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    } else if (o.stream) {
      if (r.text.size() > shown[r.prompt].size()) std::cout << r.text.substr(shown[r.prompt].size());
      std::cout << std::endl;
    } else {
      print(r.text);
    }
  });
  return 0;
}

}  // namespace

CLI::App* add_generate_command(CLI::App& app, Action& run) {
  auto o = std::make_shared<GenerateCliOptions>();
  auto* cmd = app.add_subcommand("generate", "Continue prompts (greedy, or sampled with the usual controls)");
  cmd->add_option("--model", o->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--adapter", o->adapter, "PEFT LoRA adapter directory");
  cmd->add_option("--tokenizer", o->tokenizer_dir, "Tokenizer directory (default: the model directory)");
  cmd->add_option("--prompt", o->prompt, "Prompt text");
  cmd->add_option("--prompt-file", o->prompt_file, "Prompts: one per line, or a .jsonl file of {\"prompt\": ...}");
  cmd->add_flag("--chat", o->chat,
                "Prompts are user messages in the model's chat format; with no prompt on a terminal, chat interactively");
  cmd->add_option("--system", o->system, "--chat: a system message first");
  cmd->add_option("--chat-format", o->chat_format, "--chat: auto (the tokenizer's chat template), llama3, llama2, chatml, qwen3 or plain");
  cmd->add_option("--max-new-tokens", o->g.max_new_tokens, "Tokens to generate at most")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--sample", o->sample, "Sample with the default settings (temperature 1, top-k 50)");
  cmd->add_option_function<double>("--temperature", [o](double t) { o->g.sampling.temperature = t, o->temperature_set = true; },
                                   "Sampling temperature; 0: greedy");
  cmd->add_option_function<std::int64_t>("--top-k", [o](std::int64_t k) { o->g.sampling.top_k = k, o->top_k_set = true; },
                                         "Keep the k most likely tokens (0: off; default 50 when sampling)");
  cmd->add_option_function<double>("--top-p", [o](double p) { o->g.sampling.top_p = p, o->top_p_set = true; },
                                   "Keep the smallest set of tokens with probability mass >= p, in [0, 1]");
  cmd->add_option("--repetition-penalty", o->g.sampling.repetition_penalty, "CTRL repetition penalty (1: off)");
  cmd->add_option("--no-repeat-ngram-size,--no-repeat-ngram", o->g.sampling.no_repeat_ngram_size,
                  "Never repeat an n-gram of this size (0: off)");
  cmd->add_option("--num-beams", o->g.num_beams, "Beam search with this many beams (1: greedy or sampled)");
  cmd->add_option("--length-penalty", o->g.length_penalty,
                  "Beam search: a finished beam scores sum log p / length^this (> 0 favours longer, < 0 shorter)");
  cmd->add_option("--early-stopping", o->early_stopping,
                  "Beam search: true (stop at num_beams finished), false (when no beam can win at this length), never")
      ->check(CLI::IsMember({"true", "false", "never"}));
  cmd->add_option("--stop", o->stop, "Stop a sequence where this text appears (repeatable); the text is cut before it");
  cmd->add_option("--batch-size", o->batch_size, "Prompts generated together (left-padded), default 8");
  cmd->add_option("--seed", o->g.seed, "Sampling seed");
  cmd->add_flag("--json", o->json, "One JSON object per prompt: ids, text, stop reason, tokens/s, peak memory");
  cmd->add_flag("--stream", o->stream, "Print the text as it is generated (one prompt at a time)");
  cmd->add_option("--dtype", o->dtype, "Compute dtype: fp32, bf16 or fp16");
  cmd->add_option("--quantize", o->quantize, "Quantise the base's projections: int8 (LLM.int8) or nf4 (QLoRA); an adapter stays in full precision")
      ->check(CLI::IsMember({kQuantNone, kQuantInt8, kQuantNf4}));
  cmd->add_flag("--no-special", o->no_special, "Do not add BOS to the prompt");
  cmd->callback([o, &run] { run = [o] { return run_generate(*o); }; });
  return cmd;
}

}  // namespace ctune::cli
