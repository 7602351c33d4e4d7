// RecordFormatter: one dataset record (JSON object) -> Rendered text with its loss mask, per
// data.format. Resolves once, at construction, what auto settings mean for this tokenizer
// (chat format from the chat_template, Alpaca vs chat for instruct records) and checks that
// the tokenizer has the tokens the choice needs.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "core/json.h"
#include "data/chat_format.h"
#include "data/chat_template.h"
#include "data/options.h"
#include "data/preference.h"
#include "data/rendered.h"
#include "tokenizer/tokenizer.h"

namespace ctune::data {

// bos/eos strings and the add_bos flag of a tokenizer, for the renderers.
ChatTokens chat_tokens(const tok::Tokenizer& tokenizer);

class RecordFormatter {
 public:
  // `chat_template`: the tokenizer's template (read_chat_template), nullopt when none.
  // ConfigError/UnsupportedError when the options cannot work with this tokenizer.
  RecordFormatter(const DataOptions& options, const tok::Tokenizer& tokenizer,
                  const std::optional<std::string>& chat_template);

  // FormatError naming `where` for a record that does not fit the format.
  Rendered render(const OrderedJson& record, const std::string& where) const;
  // data.format preference: {prompt + chosen, prompt + rejected} (preference.h).
  std::array<Rendered, 2> render_pair(const OrderedJson& record, const std::string& where) const;
  // data.format unpaired_preference: prompt + completion and the label (preference.h).
  Unpaired render_unpaired(const OrderedJson& record, const std::string& where) const;

  // What auto resolved to: the chat format used for chat records and for instruct records
  // rendered as chat.
  const ChatSpec& chat_spec() const { return chat_; }
  InstructTemplate instruct_template() const { return instruct_; }
  // The model's own template when chat records render with it (chat_format auto or template).
  const ChatTemplate* chat_template() const { return template_ ? &*template_ : nullptr; }

 private:
  DataFormat format_;
  Columns columns_;
  bool add_eos_;
  ChatTokens tokens_;
  ChatSpec chat_;
  std::optional<ChatTemplate> template_;
  bool train_on_input_;
  InstructTemplate instruct_;
};

}  // namespace ctune::data
