// The Llama-3 and Llama-2 chat renderers, written from the models' own chat_template sources
// (the Jinja is quoted above each function) so that Rendered::str() is byte-equal to what the
// template renders under Hugging Face's Jinja with add_generation_prompt false.
#include "core/error.h"
#include "data/chat_format.h"

namespace ctune::data {

// Llama-3 (Meta-Llama-3-8B-Instruct):
//   {% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] +
//   '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}
//   {% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}
//   {% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
// The final header is unconditional in that template (spec.header_after_last); revisions that
// wrap it in {% if add_generation_prompt %} leave it out.
Rendered render_llama3(const Conversation& conv, const ChatSpec& spec, const ChatTokens& tokens) {
  Rendered r;
  for (std::size_t i = 0; i < conv.size(); ++i) {
    const Message& m = conv[i];
    const bool assistant = m.role == Role::assistant;
    if (i == 0 && tokens.bos) r.special(*tokens.bos, false);
    r.special("<|start_header_id|>", false);
    r.text(role_name(m.role), false);
    r.special("<|end_header_id|>", false);
    r.text("\n\n", false);
    // `| trim` leaves no leading whitespace, so the boundary after "\n\n" is a token boundary.
    r.text(py_strip(m.content), assistant);
    r.special("<|eot_id|>", assistant);
  }
  if (spec.header_after_last) {
    r.special("<|start_header_id|>", false);
    r.text("assistant", false);
    r.special("<|end_header_id|>", false);
    r.text("\n\n", false);
  }
  return r;
}

// Llama-2-chat (meta-llama/Llama-2-7b-chat-hf, tests/data/llama2_chat_template.jinja):
//   system_message = messages[0]['content'] when it is a system message; then for each other
//   message (roles must alternate user/assistant, else raise_exception):
//   user:      bos_token + '[INST] ' + content.strip() + ' [/INST]'
//              where the first user content is '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content
//   assistant: ' ' + content.strip() + ' ' + eos_token
// The template silently drops a system message at an odd position after the first and raises
// for one at an even position; both are refused here with the same clear message.
Rendered render_llama2(const Conversation& conv, const ChatTokens& tokens, const std::string& where) {
  Rendered r;
  std::size_t first = 0;
  const std::string* system = nullptr;
  if (!conv.empty() && conv[0].role == Role::system) {
    system = &conv[0].content;
    first = 1;
  }
  for (std::size_t i = first; i < conv.size(); ++i) {
    const Message& m = conv[i];
    const bool expect_user = (i - first) % 2 == 0;
    if (m.role == Role::system)
      throw FormatError(where + ": messages[" + std::to_string(i) +
                        "] is a system message; the llama2 format allows one only as the first message");
    if ((m.role == Role::user) != expect_user)
      throw FormatError(where + ": messages[" + std::to_string(i) + "] is " + role_name(m.role) + ", expected " +
                        (expect_user ? "user" : "assistant") +
                        " (llama2 format: roles must alternate user/assistant/..., after an optional system message)");
    std::string content = m.content;
    if (i == first && system) content = "<<SYS>>\n" + *system + "\n<</SYS>>\n\n" + content;
    if (m.role == Role::user) {
      if (tokens.bos) r.special(*tokens.bos, false);
      r.text("[INST] " + py_strip(content) + " [/INST]", false);
    } else {
      // The space before the content belongs to its first word ("▁word" in SentencePiece
      // vocabularies), so it is trained with it.
      r.text(" " + py_strip(content) + " ", true);
      if (tokens.eos) r.special(*tokens.eos, true);
    }
  }
  return r;
}

}  // namespace ctune::data
