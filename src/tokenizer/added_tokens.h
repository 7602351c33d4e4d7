// Added tokens (tokenizer.json `added_tokens`, and the control pieces of SentencePiece models):
// strings such as "<|eot_id|>" that are cut out of the text before normalisation and
// pre-tokenisation and map straight to their ids. Matching is leftmost-longest over a byte trie
// (what the Rust crate's Aho-Corasick automaton does), honouring lstrip/rstrip (the token
// swallows the whitespace beside it) and single_word (matches only between word boundaries).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ctune::tok {

struct AddedToken {
  std::string content;
  std::int32_t id = -1;
  bool special = false;
  bool normalized = false;  // matched on normalized text rather than raw text
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A piece of a split text: either plain text or an added token (token >= 0 is an index into
// the matcher's token list).
struct Segment {
  std::size_t begin = 0;
  std::size_t end = 0;
  int token = -1;
};

// Leftmost-longest matcher over a fixed set of patterns.
class TokenMatcher {
 public:
  // `patterns[i]` is the text matched for `tokens[i]` (the content, or its normalized form).
  TokenMatcher(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens);
  TokenMatcher() = default;

  bool empty() const { return patterns_.empty(); }
  // Splits `text` into plain and token segments covering it completely (stripped whitespace
  // belongs to the token segment). Plain segments are never empty.
  void split(std::string_view text, std::vector<Segment>& out) const;
  // Turns the segments of special tokens back into plain text, merged with the plain segments
  // beside them (so the text around a would-be control token is tokenized as one piece).
  void special_as_text(std::vector<Segment>& segments) const;
  const AddedToken& token(int index) const { return *tokens_[static_cast<std::size_t>(index)]; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;  // sorted by byte
    int pattern = -1;
  };
  std::int32_t child(std::int32_t node, unsigned char byte) const;

  std::vector<std::string> patterns_;
  std::vector<const AddedToken*> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace ctune::tok
