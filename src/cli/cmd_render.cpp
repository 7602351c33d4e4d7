// `ctune render`: conversations as the model sees them in training: the chat format's text
// (the tokenizer's own template by default), its ids, and which of them train. On a terminal
// the trained text is coloured; --json prints one {"text", "ids", "mask"} object per
// conversation; otherwise the plain text, then a line counting the tokens and trained tokens.
#include <unistd.h>

#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "data/chat_template.h"
#include "data/example_builder.h"
#include "data/formatter.h"
#include "data/records.h"
#include "tokenizer/load.h"

namespace ctune::cli {

namespace {

struct RenderOptions {
  std::string tokenizer_dir;
  std::string data;
  std::string messages;
  std::string chat_format = "auto";
  std::string chat_template;
  bool generation_prompt = false;
  bool json = false;
  bool train_on_input = false;
  std::int64_t limit = 0;
  std::vector<std::string> kwargs;  // name=value
};

// name=value -> {name: value}; the value is JSON when it parses as JSON (false, 3, "x", [..]),
// else the string itself.
OrderedJson parse_kwargs(const std::vector<std::string>& items) {
  OrderedJson out = OrderedJson::object();
  for (const std::string& kv : items) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError("render: expected name=value, found \"" + kv + "\"");
    const std::string value = kv.substr(eq + 1);
    OrderedJson v = OrderedJson::parse(value, nullptr, /*allow_exceptions=*/false);
    out[kv.substr(0, eq)] = v.is_discarded() ? OrderedJson(value) : v;
  }
  return out;
}

constexpr const char* kTrained = "\x1b[1;32m";
constexpr const char* kReset = "\x1b[0m";

void print(const std::string& text, const data::BuildResult& built, const std::vector<std::pair<std::size_t, std::size_t>>& spans,
           const RenderOptions& o) {
  const auto& ex = built.example;
  if (o.json) {
    OrderedJson j;
    j["text"] = text;
    j["ids"] = ex.ids;
    std::vector<int> mask;
    for (const auto l : ex.labels) mask.push_back(l != data::kIgnoreIndex ? 1 : 0);
    j["mask"] = mask;
    std::cout << j.dump() << '\n';
    return;
  }
  std::size_t trained = 0;
  for (const auto l : ex.labels) trained += l != data::kIgnoreIndex;
  if (isatty(STDOUT_FILENO)) {
    std::size_t at = 0;
    for (auto [b, e] : spans) {
      std::cout << text.substr(at, b - at) << kTrained << text.substr(b, e - b) << kReset;
      at = e;
    }
    std::cout << text.substr(at);
  } else {
    std::cout << text;
  }
  std::cout << "\n# " << ex.ids.size() << " tokens, " << trained << " trained\n";
}

int run_render(const RenderOptions& o) {
  auto tokenizer = tok::load_tokenizer(o.tokenizer_dir);
  data::DataOptions options;
  options.format = data::DataFormat::chat;
  options.chat_format = data::parse_chat_format(o.chat_format, "--chat-format");
  options.chat_template = o.chat_template;
  options.template_kwargs = parse_kwargs(o.kwargs);
  options.train_on_input = o.train_on_input;
  options.tokenizer_dir = o.tokenizer_dir;
  const data::RecordFormatter formatter(options, *tokenizer, data::read_chat_template(o.tokenizer_dir));
  const data::ExampleBuilder builder(*tokenizer, o.train_on_input, /*max_seq_len=*/0);

  auto one = [&](const OrderedJson& record, const std::string& where) {
    if (o.generation_prompt) {
      const data::ChatTemplate* t = formatter.chat_template();
      if (!t) throw ConfigError("render --generation-prompt needs the tokenizer's own chat template (chat format template)");
      const data::ChatRecord rec = data::parse_chat_record(record, options.columns.messages, options.columns.tools, where);
      const std::string text = t->render(rec.messages, rec.tools, /*add_generation_prompt=*/true);
      data::Rendered r;
      r.set_parse_special(true);
      r.text(text, false);
      print(text, builder.build(r), {}, o);
      return;
    }
    const data::Rendered r = formatter.render(record, where);
    // Trained byte ranges of the text, from the pieces.
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    std::size_t at = 0;
    for (const data::Piece& p : r.pieces()) {
      if (p.trained || o.train_on_input) spans.emplace_back(at, at + p.text.size());
      at += p.text.size();
    }
    print(r.str(), builder.build(r), spans, o);
  };

  if (!o.messages.empty()) {
    OrderedJson m = parse_json_ordered(o.messages, "--messages");
    one(m.is_array() ? OrderedJson{{"messages", m}} : m, "--messages");
  } else {
    data::RecordReader reader(o.data);
    data::Record rec;
    for (std::int64_t n = 0; reader.next(rec) && (o.limit <= 0 || n < o.limit); ++n) {
      one(rec.value, rec.where);
      if (!o.json) std::cout << '\n';
    }
  }
  std::cout.flush();
  return 0;
}

}  // namespace

CLI::App* add_render_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<RenderOptions>();
  auto* cmd = app.add_subcommand("render", "Show conversations as the model sees them in training: text, ids, trained tokens");
  cmd->add_option("--tokenizer", opts->tokenizer_dir, "Directory with the tokenizer (and its chat template)")->required();
  auto* input = cmd->add_option_group("input", "exactly one of");
  input->add_option("--data", opts->data, "JSONL or JSON-array dataset of chat records (messages, or ShareGPT conversations)");
  input->add_option("--messages", opts->messages, "One conversation: a JSON list of messages, or {\"messages\", \"tools\"}");
  input->require_option(1);
  cmd->add_flag("--generation-prompt", opts->generation_prompt,
                "Render with add_generation_prompt (what generate --chat feeds the model)");
  cmd->add_flag("--json", opts->json, "One JSON object per conversation: text, ids, mask");
  cmd->add_flag("--train-on-input", opts->train_on_input, "Mark every token trained (data.train_on_input)");
  cmd->add_option("--chat-format", opts->chat_format, "auto, template, llama3, chatml, qwen3, llama2 or plain (data.chat_format)");
  cmd->add_option("--chat-template", opts->chat_template, "A template name of the tokenizer, or a .jinja file (data.chat_template)");
  cmd->add_option("--limit", opts->limit, "Render at most this many records of --data");
  cmd->add_option("kwargs", opts->kwargs, "Template variables as name=value (data.template_kwargs), e.g. enable_thinking=false");
  cmd->callback([opts, &run] { run = [opts] { return run_render(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
