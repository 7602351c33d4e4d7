// Chat template reading, family detection, the plain format and render_chat dispatch; see
// chat_format.h. Detection looks for each family's marker tokens in the template source and
// refuses the variants whose output the native renderers would not reproduce, rather than
// training on a format the model never saw.
#include "data/chat_format.h"

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/json.h"
#include "data/chat_template.h"

namespace ctune::data {
namespace {

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// The value of a Jinja string literal's body (the text between the quotes).
std::string unescape_jinja(std::string_view body) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out.push_back(body[i]);
      continue;
    }
    char c = body[++i];
    switch (c) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      default: out.push_back(c); break;  // \\ \' \"
    }
  }
  return out;
}

// A ChatML template's default system message: a complete string literal
// '<|im_start|>system\n...<|im_end|>\n' (Qwen2: "You are a helpful assistant.").
std::optional<std::string> chatml_default_system(std::string_view tpl) {
  for (char quote : {'\'', '"'}) {
    const std::string open = std::string(1, quote) + "<|im_start|>system\\n";
    for (std::size_t at = tpl.find(open); at != std::string_view::npos; at = tpl.find(open, at + 1)) {
      const std::size_t body = at + open.size();
      // The literal's end: the next unescaped quote of the same kind.
      std::size_t end = body;
      while (end < tpl.size() && tpl[end] != quote) end += tpl[end] == '\\' ? 2 : 1;
      if (end >= tpl.size()) break;
      const std::string_view literal = tpl.substr(body, end - body);
      const std::string_view suffix = "<|im_end|>\\n";
      if (literal.size() >= suffix.size() && literal.substr(literal.size() - suffix.size()) == suffix)
        return unescape_jinja(literal.substr(0, literal.size() - suffix.size()));
    }
  }
  return std::nullopt;
}

[[noreturn]] void unsupported(const std::string& what) {
  throw UnsupportedError("tokenizer chat_template: " + what +
                         "; set data.chat_format to one of llama3 | chatml | qwen3 | llama2 | plain to choose a "
                         "format explicitly");
}

// The plain format, for models without a chat template. Messages are joined with "\n", each
// written "<Role>: <content>" with Role System, User or Assistant; an assistant message ends
// with the eos token. The tokenizer's bos starts the text when its add_bos flag is set:
//   <s>System: Be brief.\nUser: Hi\nAssistant: Hello!</s>\nUser: ...
// Trained: " <assistant content>" (the space after the colon starts the content's first word
// token) and the eos.
Rendered render_plain(const Conversation& conv, const ChatTokens& tokens) {
  Rendered r;
  if (tokens.add_bos && tokens.bos) r.special(*tokens.bos, false);
  for (std::size_t i = 0; i < conv.size(); ++i) {
    const Message& m = conv[i];
    if (i > 0) r.text("\n", false);
    switch (m.role) {
      case Role::system: r.text("System: " + m.content, false); break;
      case Role::user: r.text("User: " + m.content, false); break;
      case Role::assistant:
        r.text("Assistant:", false);
        r.trained_text(" " + m.content);
        if (tokens.eos) r.special(*tokens.eos, true);
        break;
    }
  }
  return r;
}

}  // namespace

std::optional<std::string> read_chat_template(const std::filesystem::path& dir) {
  const auto all = read_chat_templates(dir);
  auto it = all.find("default");
  if (it == all.end()) return std::nullopt;
  return it->second;
}

ChatSpec detect_chat_format(const std::optional<std::string>& chat_template) {
  ChatSpec spec;
  if (!chat_template || chat_template->empty()) return spec;  // plain
  const std::string_view tpl = *chat_template;
  if (contains(tpl, "<|start_header_id|>")) {
    // Llama-3.1 and later insert a system turn with "Cutting Knowledge Date" and a date.
    if (contains(tpl, "Cutting Knowledge Date") || contains(tpl, "Environment: ipython"))
      unsupported("Llama-3.1+ template (dated system header) is not reproduced; llama3 renders the Llama-3 format");
    spec.format = ChatFormat::llama3;
    spec.header_after_last = !contains(tpl, "add_generation_prompt");
    return spec;
  }
  if (contains(tpl, "<|im_start|>")) {
    if (contains(tpl, "<think>")) {
      if (!contains(tpl, "last_query_index"))
        unsupported("ChatML template with <think> handling other than Qwen3's is not reproduced");
      spec.format = ChatFormat::qwen3;
      return spec;
    }
    spec.format = ChatFormat::chatml;
    spec.default_system = chatml_default_system(tpl);
    return spec;
  }
  if (contains(tpl, "[INST]")) {
    if (!contains(tpl, "<<SYS>>"))
      unsupported("[INST] template without <<SYS>> (Mistral style) is not reproduced; llama2 differs from it");
    spec.format = ChatFormat::llama2;
    return spec;
  }
  unsupported("not recognised as Llama-3, ChatML, Qwen3 or Llama-2");
}

ChatSpec resolve_chat_format(ChatFormat requested, const std::optional<std::string>& chat_template) {
  ChatSpec spec;
  if (requested == ChatFormat::automatic) {
    spec.format = chat_template && !chat_template->empty() ? ChatFormat::model_template : ChatFormat::plain;
    return spec;
  }
  spec.format = requested;
  if (requested == ChatFormat::model_template) return spec;
  try {
    ChatSpec detected = detect_chat_format(chat_template);
    if (detected.format == requested) spec = detected;
  } catch (const UnsupportedError&) {
    // An explicit format does not need the template to be one we reproduce.
  }
  return spec;
}

Rendered render_chat(const Conversation& conv, const ChatSpec& spec, const ChatTokens& tokens,
                     const std::string& where) {
  switch (spec.format) {
    case ChatFormat::llama3: return render_llama3(conv, spec, tokens);
    case ChatFormat::llama2: return render_llama2(conv, tokens, where);
    case ChatFormat::chatml: return render_chatml(conv, spec);
    case ChatFormat::qwen3: return render_qwen3(conv);
    case ChatFormat::plain: return render_plain(conv, tokens);
    case ChatFormat::automatic:
    case ChatFormat::model_template: break;
  }
  throw std::logic_error("render_chat: auto and template are rendered by ChatTemplate");
}

void append_generation_prompt(Rendered& r, const ChatSpec& spec, bool conversation_empty) {
  switch (spec.format) {
    case ChatFormat::llama3:
      if (spec.header_after_last) return;  // render_llama3 has already appended it
      r.special("<|start_header_id|>", false);
      r.text("assistant", false);
      r.special("<|end_header_id|>", false);
      r.text("\n\n", false);
      return;
    case ChatFormat::chatml:
    case ChatFormat::qwen3:
      r.special("<|im_start|>", false);
      r.text("assistant\n", false);
      return;
    case ChatFormat::llama2: return;
    case ChatFormat::plain:
      // render_plain's assistant turn starts "Assistant:" and the answer " <content>".
      r.text(conversation_empty ? "Assistant:" : "\nAssistant:", false);
      return;
    case ChatFormat::automatic:
    case ChatFormat::model_template: break;
  }
  throw std::logic_error("append_generation_prompt: auto and template are rendered by ChatTemplate");
}

std::optional<std::string> end_of_turn_token(const ChatSpec& spec) {
  switch (spec.format) {
    case ChatFormat::llama3: return "<|eot_id|>";
    case ChatFormat::chatml:
    case ChatFormat::qwen3: return "<|im_end|>";
    default: return std::nullopt;
  }
}

}  // namespace ctune::data
