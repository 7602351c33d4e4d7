// The two big tables of a BPE tokenizer.json, model.vocab and model.merges, as flat arrays over
// one byte arena. A 128k vocabulary has ~400k strings between them; keeping them out of a JSON
// DOM (one heap node per string, a std::map per object) is what makes loading fast. Filled
// either by the streaming reader of tokenizer_json.h or from an in-memory JSON object.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace ctune::tok {

struct BpeTables {
  struct Token {
    std::uint32_t offset, size;  // in arena
    std::int64_t id;
  };
  struct MergePair {
    std::uint32_t left_offset, left_size, right_offset, right_size;  // in arena
  };

  std::string arena;
  std::vector<Token> vocab;
  std::vector<MergePair> merges;

  std::string_view text(std::uint32_t offset, std::uint32_t size) const {
    return std::string_view(arena).substr(offset, size);
  }
  // Appends bytes to the arena and returns their offset. FormatError beyond 4 GiB.
  std::uint32_t store(std::string_view s, const std::string& where);

  void add_token(std::string_view token, std::int64_t id, const std::string& where);
  // A merge in the "left right" string form; FormatError unless exactly one space separates
  // two non-empty halves. `where` names model.merges.
  void add_merge(std::string_view spaced, const std::string& where);
  void add_merge(std::string_view left, std::string_view right, const std::string& where);

  // From model.vocab (object of token -> integer id) and model.merges (strings or pairs) of an
  // in-memory model object. `where` names the model object.
  static BpeTables from_json(const Json& model, const std::string& where);
};

}  // namespace ctune::tok
