// Chat formats: which family a conversation is rendered in, found from the tokenizer's
// chat_template when data.chat_format is auto, and the native renderers (no Jinja interpreter)
// that reproduce each family's template byte for byte:
//   llama3  <|start_header_id|>role<|end_header_id|>\n\n{content|trim}<|eot_id|>, bos first
//   chatml  <|im_start|>role\n{content}<|im_end|>\n (with the template's default system message)
//   qwen3   ChatML plus Qwen3's <think> handling of assistant turns after the last user query
//   llama2  <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
//   plain   for models without a template, see render_plain() in chat_format.cpp
// Loss mask (train_on_input: false): the assistant content and its end-of-turn token
// (<|eot_id|>, <|im_end|>, eos) are trained; system and user turns and the role headers are not.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "data/conversation.h"
#include "data/options.h"
#include "data/rendered.h"

namespace ctune::data {

// A resolved chat format and the details of its template that change the rendered text.
struct ChatSpec {
  ChatFormat format = ChatFormat::plain;  // never ChatFormat::automatic once resolved
  // llama3: the original Llama-3-Instruct template appends the assistant header even when
  // add_generation_prompt is false (its source never tests that variable).
  bool header_after_last = false;
  // chatml: the system message the template inserts when the conversation has none
  // (Qwen2/Qwen2.5 style).
  std::optional<std::string> default_system;
};

// The bos/eos token strings the templates use (bos_token, eos_token), from the tokenizer.
struct ChatTokens {
  std::optional<std::string> bos;
  std::optional<std::string> eos;
  bool add_bos = false;  // the tokenizer's add_bos flag; plain format prepends bos when set
};

// The chat template of the tokenizer in `dir`: chat_template.jinja when present, else the
// "chat_template" of tokenizer_config.json (a string, or a list of {"name", "template"} of
// which "default" is used). nullopt when there is none or `dir` is empty.
std::optional<std::string> read_chat_template(const std::filesystem::path& dir);

// The family of a chat template's source. No template: plain. UnsupportedError for a template
// that is recognised but rendered differently from every family here (Llama-3.1+ with its dated
// system header, Mistral's [INST] without <<SYS>>), and for an unrecognised template, naming
// the chat_format values that could be set instead.
ChatSpec detect_chat_format(const std::optional<std::string>& chat_template);

// data.chat_format resolved against the template: `automatic` detects; an explicit family
// keeps the template's details (header_after_last, default_system) when the template is of
// that same family, else uses the family's defaults.
ChatSpec resolve_chat_format(ChatFormat requested, const std::optional<std::string>& chat_template);

// Renders a conversation. FormatError naming `where` when the conversation breaks the format's
// rules (llama2: roles must alternate user/assistant after an optional first system message).
Rendered render_chat(const Conversation& conv, const ChatSpec& spec, const ChatTokens& tokens,
                     const std::string& where);

// What the template adds with add_generation_prompt=True after a conversation that ends with a
// user (or system) turn: the assistant header the model continues from (llama3: its header,
// unless the template always appends it; chatml, qwen3: <|im_start|>assistant\n; llama2:
// nothing, the user turn ends with [/INST]; plain: "\nAssistant:"). `ctune generate --chat`.
void append_generation_prompt(Rendered& rendered, const ChatSpec& spec, bool conversation_empty);

// The token that ends an assistant turn in this format when it is not eos: <|eot_id|> (llama3),
// <|im_end|> (chatml, qwen3); nullopt for llama2 and plain, whose turns end with eos.
std::optional<std::string> end_of_turn_token(const ChatSpec& spec);

// Per-family renderers (chat_llama.cpp, chat_chatml.cpp).
Rendered render_llama3(const Conversation& conv, const ChatSpec& spec, const ChatTokens& tokens);
Rendered render_llama2(const Conversation& conv, const ChatTokens& tokens, const std::string& where);
Rendered render_chatml(const Conversation& conv, const ChatSpec& spec);
Rendered render_qwen3(const Conversation& conv);

}  // namespace ctune::data
