// `ctune score`: per-position NLL of the next token and the greedy next token for a text or
// a list of ids. --json prints exactly {"nll": [...], "argmax": [...]} on stdout.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse.h"
#include "core/error.h"
#include "core/json.h"
#include "infer/score.h"
#include "model/weights.h"
#include "ops/tensor_pool.h"
#include "peft/model_spec.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::cli {

namespace {

struct ScoreOptions {
  std::string model_dir;
  std::string text;
  std::string ids;
  std::string tokenizer_dir;  // default: the model directory
  std::string adapter;        // PEFT LoRA adapter applied to the model
  std::string dtype = "fp32";
  bool json = false;
  bool no_special = false;
};

int run_score(const ScoreOptions& o) {
  ops::use_tensor_pool();  // as training and generate: big tensors reuse their pages (ops/tensor_pool.h)
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::vector<std::int64_t> ids;
  std::string where;
  if (!o.ids.empty()) {
    ids = parse_id_list(o.ids, "--ids");
    where = "--ids";
  } else {
    tokenizer = tok::load_tokenizer(o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir);
    for (auto id : tokenizer->encode(o.text, !o.no_special)) ids.push_back(id);
    where = "--text";
  }
  peft::ModelSpec spec;
  spec.weights = o.model_dir;
  spec.storage_dtype = model::parse_dtype(o.dtype, "--dtype");  // and computed in as stored
  spec.adapter = o.adapter;
  auto lm = peft::build_model(spec);
  auto result = infer::score_tokens(lm, ids, where);

  if (o.json) {
    // Key order as documented: nll first.
    nlohmann::ordered_json out = {{"nll", result.nll}, {"argmax", result.argmax}};
    std::cout << out.dump() << std::endl;
    return 0;
  }
  double total = 0;
  std::printf("%5s %8s  %-20s %10s %8s\n", "pos", "id", "token", "nll(next)", "argmax");
  for (std::size_t t = 0; t < ids.size(); ++t) {
    std::string piece = tokenizer ? Json(tokenizer->id_to_token(static_cast<std::int32_t>(ids[t]))).dump() : "";
    if (piece.size() > 20) piece = piece.substr(0, 17) + "...";
    if (t + 1 < ids.size()) {
      total += result.nll[t];
      std::printf("%5zu %8lld  %-20s %10.4f %8lld\n", t, static_cast<long long>(ids[t]), piece.c_str(), result.nll[t],
                  static_cast<long long>(result.argmax[t]));
    } else {
      std::printf("%5zu %8lld  %-20s %10s %8lld\n", t, static_cast<long long>(ids[t]), piece.c_str(), "-",
                  static_cast<long long>(result.argmax[t]));
    }
  }
  if (!result.nll.empty()) {
    const double mean = total / static_cast<double>(result.nll.size());
    std::printf("tokens %zu  mean nll %.4f  perplexity %.2f\n", ids.size(), mean, std::exp(mean));
  }
  return 0;
}

}  // namespace

CLI::App* add_score_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<ScoreOptions>();
  auto* cmd = app.add_subcommand("score", "Per-token negative log-likelihood and greedy next token");
  cmd->add_option("--model", opts->model_dir, "Hugging Face model directory")->required();
  auto* input = cmd->add_option_group("input", "exactly one of");
  input->add_option("--text", opts->text, "Text to score (tokenized with the model's tokenizer)");
  input->add_option("--ids", opts->ids, "Comma-separated token ids, e.g. 1,2,3");
  input->require_option(1);
  cmd->add_option("--tokenizer", opts->tokenizer_dir, "Tokenizer directory (default: the model directory)");
  cmd->add_option("--adapter", opts->adapter, "PEFT LoRA adapter directory to apply to the model");
  cmd->add_option("--dtype", opts->dtype, "Compute dtype: fp32, bf16 or fp16");
  cmd->add_flag("--json", opts->json, "Print {\"nll\": [T-1 numbers], \"argmax\": [T integers]} only");
  cmd->add_flag("--no-special", opts->no_special, "Do not add BOS/EOS when tokenizing --text");
  cmd->callback([opts, &run] { run = [opts] { return run_score(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
