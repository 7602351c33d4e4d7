// The ChatML and Qwen3 chat renderers, written from the templates' sources (see chat_format.h)
// so that Rendered::str() is byte-equal to the template's output with add_generation_prompt
// false and no tools.
#include "data/chat_format.h"

namespace ctune::data {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// One non-assistant turn: <|im_start|>role\ncontent<|im_end|>\n, untrained.
void plain_turn(Rendered& r, const char* role, std::string_view content) {
  r.special("<|im_start|>", false);
  r.text(std::string(role) + "\n", false);
  r.text(content, false);
  r.special("<|im_end|>", false);
  r.text("\n", false);
}

}  // namespace

// ChatML: <|im_start|>{role}\n{content}<|im_end|>\n per message, content verbatim. Templates of
// the Qwen2 kind start with their default system message when the conversation has none.
Rendered render_chatml(const Conversation& conv, const ChatSpec& spec) {
  Rendered r;
  if (spec.default_system && (conv.empty() || conv[0].role != Role::system))
    plain_turn(r, "system", *spec.default_system);
  for (const Message& m : conv) {
    if (m.role != Role::assistant) {
      plain_turn(r, role_name(m.role), m.content);
      continue;
    }
    r.special("<|im_start|>", false);
    r.text("assistant\n", false);
    r.trained_text(m.content);
    r.special("<|im_end|>", true);
    r.text("\n", false);
  }
  return r;
}

// Qwen3 (Qwen/Qwen3-*): ChatML, plus for an assistant message
//   content = message.content; reasoning = ''
//   if '</think>' in content:
//     content   = content.split('</think>')[-1].lstrip('\n')
//     reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
//   if index > last_query_index and (last message or reasoning):
//     '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n')
//   else: '<|im_start|>assistant\n' + content
//   then '<|im_end|>\n'
// where last_query_index is the last user message that is not a <tool_response> wrapper.
// Mask: an empty think block is template scaffolding (the same block Qwen3's generation prompt
// adds with enable_thinking=false) and is not trained; a non-empty one is the model's reasoning
// and is trained with the answer, from <think> on.
Rendered render_qwen3(const Conversation& conv) {
  const std::size_t n = conv.size();
  std::size_t last_query = n - 1;
  for (std::size_t k = n; k-- > 0;) {
    const Message& m = conv[k];
    if (m.role == Role::user &&
        !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  Rendered r;
  for (std::size_t i = 0; i < n; ++i) {
    const Message& m = conv[i];
    if (m.role != Role::assistant) {
      plain_turn(r, role_name(m.role), m.content);
      continue;
    }
    std::string_view content = m.content;
    std::string_view reasoning;
    const std::size_t close = content.find("</think>");
    if (close != std::string_view::npos) {
      const std::string_view before = rstrip_char(content.substr(0, close), '\n');
      const std::size_t open = before.rfind("<think>");
      reasoning = lstrip_char(open == std::string_view::npos ? before : before.substr(open + 7), '\n');
      content = lstrip_char(content.substr(content.rfind("</think>") + 8), '\n');
    }
    r.special("<|im_start|>", false);
    r.text("assistant\n", false);
    if (i > last_query && (i + 1 == n || !reasoning.empty())) {
      const bool think = !reasoning.empty();
      r.special("<think>", think);
      r.text("\n", think);
      r.text(strip_char(reasoning, '\n'), think);
      r.text("\n", think);
      r.special("</think>", think);
      r.text("\n\n", think);
      content = lstrip_char(content, '\n');
      if (think)
        r.text(content, true);
      else
        r.trained_text(content);
    } else {
      r.trained_text(content);
    }
    r.special("<|im_end|>", true);
    r.text("\n", false);
  }
  return r;
}

}  // namespace ctune::data
