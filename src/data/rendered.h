// Rendered text with its loss mask, before tokenization: the output of every renderer (chat
// formats, Alpaca, plain text) and the input of the ExampleBuilder. Pieces concatenate to
// exactly the string the model's template would produce; each says whether its tokens are
// trained (when train_on_input is false) and whether it is a special token (a template marker
// such as <|eot_id|>, looked up in the vocabulary instead of tokenized).
//
// Also the few Python string operations the chat templates use (str.strip() and friends), with
// Python's semantics, because the templates run under Python's Jinja in transformers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ctune::data {

struct Piece {
  std::string text;
  bool trained = false;
  bool special = false;
};

class Rendered {
 public:
  // Appends text; merged into the previous piece when the flags match. Empty text is dropped.
  void text(std::string_view s, bool trained);
  // Appends one special token by its text (looked up with token_to_id at build time).
  void special(std::string_view token, bool trained);
  // Appends trained text whose leading whitespace, up to and including its last line break,
  // goes to the untrained side. Byte-level pre-tokenizers (GPT-2 style regex) fold a run of
  // line breaks, and the prompt's "\n" before it, into one token; a mask boundary inside that
  // run would cut a token in two. Spaces alone are safe: they start the next word's token.
  void trained_text(std::string_view s);

  const std::vector<Piece>& pieces() const { return pieces_; }
  // The whole text, special tokens included: what the chat template renders.
  std::string str() const;
  // Marks every piece trained (train_on_input: true).
  void train_all();
  // Text rendered by a model's own chat template: special-token strings anywhere in it are
  // tokenized as their ids, as transformers tokenizes the template's output (the template's
  // markers are not separate pieces here).
  void set_parse_special(bool on) { parse_special_ = on; }
  bool parse_special() const { return parse_special_; }

 private:
  std::vector<Piece> pieces_;
  bool parse_special_ = false;
};

// Python's str.strip()/lstrip()/rstrip() with no argument: Unicode whitespace as str.isspace()
// defines it (this differs from JavaScript's trim(): U+001C..U+001F and U+0085 are whitespace to
// Python, U+FEFF is not).
std::string py_strip(std::string_view s);
std::string py_lstrip(std::string_view s);
std::string py_rstrip(std::string_view s);
// Python's s.strip(c)/lstrip(c)/rstrip(c) for one ASCII character.
std::string_view strip_char(std::string_view s, char c);
std::string_view lstrip_char(std::string_view s, char c);
std::string_view rstrip_char(std::string_view s, char c);

}  // namespace ctune::data
