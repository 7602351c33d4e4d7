// BpeTables: validation of single vocabulary and merge entries, shared by the streaming reader
// and the in-memory path so both report the same errors.
#include "tokenizer/bpe_tables.h"

#include "core/error.h"

namespace ctune::tok {

std::uint32_t BpeTables::store(std::string_view s, const std::string& where) {
  if (arena.size() + s.size() > UINT32_MAX) throw FormatError(where + ": vocabulary and merges exceed 4 GiB");
  auto offset = static_cast<std::uint32_t>(arena.size());
  arena.append(s);
  return offset;
}

void BpeTables::add_token(std::string_view token, std::int64_t id, const std::string& where) {
  const std::uint32_t offset = store(token, where);
  vocab.push_back({offset, static_cast<std::uint32_t>(token.size()), id});
}

void BpeTables::add_merge(std::string_view spaced, const std::string& where) {
  const auto space = spaced.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == spaced.size() ||
      spaced.find(' ', space + 1) != std::string_view::npos) {
    throw FormatError(where + "[" + std::to_string(merges.size()) + "]: expected \"left right\", found \"" +
                      std::string(spaced.substr(0, 80)) + "\"");
  }
  add_merge(spaced.substr(0, space), spaced.substr(space + 1), where);
}

void BpeTables::add_merge(std::string_view left, std::string_view right, const std::string& where) {
  const std::uint32_t l = store(left, where), r = store(right, where);
  merges.push_back({l, static_cast<std::uint32_t>(left.size()), r, static_cast<std::uint32_t>(right.size())});
}

BpeTables BpeTables::from_json(const Json& model, const std::string& where) {
  BpeTables t;
  const std::string vw = where + ".vocab", mw = where + ".merges";
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end()) throw FormatError(where + ": missing key \"vocab\"");
  if (!vocab_it->is_object())
    throw FormatError(vw + ": expected an object, found " + json_type_name(*vocab_it));
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it->is_number_integer()) {
      throw FormatError(vw + ": token \"" + it.key() + "\" expected an integer id, found " +
                        json_type_name(*it));
    }
    t.add_token(it.key(), it->get<std::int64_t>(), vw);
  }
  auto merges_it = model.find("merges");
  if (merges_it == model.end() || merges_it->is_null()) return t;
  if (!merges_it->is_array())
    throw FormatError(mw + ": expected an array, found " + json_type_name(*merges_it));
  for (const Json& m : *merges_it) {
    if (m.is_string()) {
      t.add_merge(m.get_ref<const std::string&>(), mw);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      t.add_merge(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>(), mw);
    } else {
      throw FormatError(mw + "[" + std::to_string(t.merges.size()) +
                        "]: expected a string or a pair of strings, found " + m.dump().substr(0, 60));
    }
  }
  return t;
}

}  // namespace ctune::tok
