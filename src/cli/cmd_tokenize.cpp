// `ctune tokenize`: text -> ids with a model's tokenizer. With --file, each line of the file is
// a JSON string and each output line is the JSON array of its ids.
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/regular_file.h"
#include "core/json.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer_dir;
  std::string text;
  std::string file;
  bool json = false;
  bool no_special = false;
  bool special_as_text = false;
};

Json ids_json(const std::vector<std::int32_t>& ids) { return Json(ids); }

int run_tokenize(const TokenizeOptions& o) {
  auto tokenizer = tok::load_tokenizer(o.tokenizer_dir);
  const bool special = !o.no_special;
  if (!o.file.empty()) {
    require_regular_file(o.file, "a text file");
    std::ifstream in(o.file, std::ios::binary);
    if (!in) throw IoError(o.file + ": cannot open for reading");
    std::string line;
    for (std::size_t n = 1; std::getline(in, line); ++n) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      Json value = parse_json(line, o.file + ":" + std::to_string(n));
      if (!value.is_string()) {
        throw FormatError(o.file + ":" + std::to_string(n) + ": expected a JSON string per line, found " + json_type_name(value));
      }
      std::cout << ids_json(tokenizer->encode(value.get<std::string>(), special, o.special_as_text)).dump() << '\n';
    }
    std::cout.flush();
    return 0;
  }
  auto ids = tokenizer->encode(o.text, special, o.special_as_text);
  if (o.json) {
    std::cout << ids_json(ids).dump() << std::endl;
    return 0;
  }
  for (auto id : ids) std::cout << id << '\t' << Json(tokenizer->id_to_token(id)).dump() << '\n';
  std::cout << ids.size() << " tokens (" << tokenizer->kind() << ")" << std::endl;
  return 0;
}

}  // namespace

CLI::App* add_tokenize_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize", "Encode text with a tokenizer.json or tokenizer.model");
  cmd->add_option("--tokenizer", opts->tokenizer_dir, "Directory with tokenizer.json or tokenizer.model, or the file")
      ->required();
  auto* input = cmd->add_option_group("input", "exactly one of");
  input->add_option("--text", opts->text, "Text to encode");
  input->add_option("--file", opts->file, "File with one JSON string per line; prints one JSON id array per line");
  input->require_option(1);
  cmd->add_flag("--json", opts->json, "Print the ids as one JSON array");
  cmd->add_flag("--no-special", opts->no_special, "Do not add BOS/EOS");
  cmd->add_flag("--special-as-text", opts->special_as_text,
                "Tokenize special-token strings in the text (e.g. <|eot_id|>) as text, as training data is by default "
                "(without it: their ids, as Hugging Face does)");
  cmd->callback([opts, &run] { run = [opts] { return run_tokenize(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
