// The model's own chat template (tokenizer_config.json "chat_template", chat_template.jinja),
// applied as transformers' apply_chat_template applies it, and the assistant spans that
// training learns, found from the rendering itself. docs/chat-templates.md has the rules.
//
// Variables: messages, tools (none when the record has none), documents (none),
// add_generation_prompt, the tokenizer's special tokens by name (bos_token, eos_token, ...,
// additional_special_tokens), then data.template_kwargs.
// Spans: the output of {% generation %} blocks when the template has them; otherwise, for each
// assistant message (not marked "train": false), the part of the text that changes when that
// message's own fields (content, reasoning_content, tool calls) change, found by rendering the
// conversation twice more with those fields replaced by two different sentinels; then through
// the end-of-turn token (eos, or a special token named like <|im_end|>, <|eot_id|>,
// <end_of_turn>) that follows it, before the next message starts. A message whose part holds
// another message's text (a template that writes the assistant's content twice, around the user
// turn) is refused: its span would train the prompt.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "data/rendered.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

namespace ctune::data {

// The templates of a tokenizer directory by name: "default" (chat_template.jinja, or the
// string "chat_template" of tokenizer_config.json), and each {"name", "template"} of a list,
// plus additional_chat_templates/<name>.jinja. Empty when there is none or `dir` is empty.
std::map<std::string, std::string> read_chat_templates(const std::filesystem::path& dir);

// A conversation record as the template sees it.
struct ChatRecord {
  OrderedJson messages;            // list of message objects, as in the record
  OrderedJson tools;               // list, or null
  std::vector<bool> trainable;     // per message: false when it had "train": false
};

// record[messages_column] (or a ShareGPT "conversations" list of {"from", "value"}, converted:
// human -> user, gpt -> assistant, system, tool/function/observation -> tool) and
// record[tools_column]. FormatError naming `where` and the message index for a record a
// template cannot be given: messages not a non-empty list of objects, a role that is not a
// string, content that is not a string, a list of parts or null, "train" that is not a boolean.
ChatRecord parse_chat_record(const OrderedJson& record, const std::string& messages_column,
                             const std::string& tools_column, const std::string& where);

class ChatTemplate {
 public:
  // `templates`: read_chat_templates(); `choice`: empty for the default (or "tool_use" for
  // records with tools, when the tokenizer has one, as transformers picks), a template name, or
  // the path of a .jinja file. `kwargs`: data.template_kwargs. ConfigError for an unknown name,
  // TemplateError for a template that does not parse.
  ChatTemplate(const std::map<std::string, std::string>& templates, const std::string& choice,
               const std::filesystem::path& tokenizer_dir, const tok::Tokenizer& tokenizer, const OrderedJson& kwargs);

  struct Text {
    std::string text;
    std::vector<std::pair<std::size_t, std::size_t>> spans;  // trained byte ranges, sorted
  };

  // The conversation's text (add_generation_prompt as given).
  std::string render(const OrderedJson& messages, const OrderedJson& tools, bool add_generation_prompt) const;
  // The conversation's text with its assistant spans (add_generation_prompt false).
  // FormatError naming `where` when the template fails on this conversation, or when it writes
  // an assistant message around another message's text (the message named).
  Text render_with_spans(const ChatRecord& record, const std::string& where) const;
  // As training tokenizes it: trained pieces per the spans (all when train_on_input), special
  // tokens in the text parsed as Hugging Face parses them.
  Rendered render_training(const ChatRecord& record, bool train_on_input, const std::string& where) const;

  const std::string& name() const { return name_; }
  // The variables besides messages, tools, documents and add_generation_prompt.
  const tmpl::Dict& variables() const { return variables_; }
  // What strftime_now() sees (tests pin it; a run uses the clock).
  void pin_time(std::time_t now) { options_.now = now; }
  // Strings that end an assistant turn (eos and special tokens named like it), longest first.
  const std::vector<std::string>& end_tokens() const { return end_tokens_; }
  bool uses_generation_blocks() const { return main_->has_generation(); }

 private:
  // The part of the text that changes with a message's own fields: [begin, end) in bytes.
  // `single` when that is one sentinel in each sentinel rendering: the fields written once, as
  // they are, so the part holds nothing else.
  struct Region {
    std::size_t begin, end;
    bool single;
  };
  // A record's messages and tools as template values, converted once per record, its text, and
  // each message's region once found (a turn's neighbours are asked for by two turns).
  struct Converted {
    const ChatRecord& record;
    tmpl::Value messages, tools;
    std::string text;
    std::vector<std::optional<std::optional<Region>>> regions;
  };
  const tmpl::Template& pick(const OrderedJson& tools) const;
  tmpl::Rendered render_values(const tmpl::Value& messages, const tmpl::Value& tools, const OrderedJson& tools_json,
                               bool add_generation_prompt) const;
  Text render_record(const ChatRecord& record, const std::string& where, bool with_spans) const;
  // Message `index`'s region; nullopt when the template renders nothing of its fields.
  std::optional<Region> region(Converted& c, std::size_t index) const;
  std::optional<Region> changed_region(const Converted& c, std::size_t index) const;
  // The nearest message before (step -1) or after (+1) `index` that the template renders.
  std::optional<std::size_t> rendered_neighbour(Converted& c, std::size_t index, int step) const;
  // A neighbour whose text lies inside `r`, message `index`'s region; nullopt when none does.
  std::optional<std::size_t> neighbour_inside(Converted& c, std::size_t index, const Region& r) const;
  // Where message `index`'s turn ends: through the end-of-turn token after `at`.
  std::size_t end_of_turn(Converted& c, std::size_t index, std::size_t at) const;

  std::string name_;
  std::shared_ptr<tmpl::Template> main_, tool_use_;
  tmpl::Dict variables_;  // special tokens, then kwargs
  tmpl::RenderOptions options_;
  std::vector<std::string> end_tokens_;
};

}  // namespace ctune::data
