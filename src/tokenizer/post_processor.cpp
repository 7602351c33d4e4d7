// Post-processor reading. A TemplateProcessing `single` template is either the serialized list
// form ([{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]) or the string form
// ("<s> $A </s>"); special token names resolve through the template's `special_tokens` map,
// which may expand one name to several ids.
#include "tokenizer/post_processor.h"

#include <sstream>

#include "core/error.h"
#include "tokenizer/component_json.h"

namespace ctune::tok {
namespace {

std::vector<std::int32_t> special_ids(const Json& config, const std::string& name, const std::string& where) {
  const std::string w = where + ".special_tokens";
  const Json& map = require_field(config, "special_tokens", where);
  if (!map.is_object() || !map.contains(name)) {
    throw FormatError(w + ": template uses \"" + name + "\" but it is not defined there");
  }
  const Json& ids = require_array(map[name], "ids", w + "." + name);
  std::vector<std::int32_t> out;
  for (const Json& id : ids) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > INT32_MAX) {
      throw FormatError(w + "." + name + ".ids: expected non-negative integers, found " + id.dump());
    }
    out.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
  }
  return out;
}

SequenceTemplate read_template(const Json& config, const std::string& where) {
  const Json& single = require_field(config, "single", where);
  // Each element: a special token name, or "" for the sequence ($A) itself.
  std::vector<std::string> items;
  if (single.is_string()) {
    std::istringstream words(single.get<std::string>());
    std::string w;
    while (words >> w) {
      auto colon = w.rfind(':');
      std::string name = colon == std::string::npos ? w : w.substr(0, colon);
      items.push_back(name == "$" || name == "$A" || name == "$B" ? "" : name);
    }
  } else if (single.is_array()) {
    for (const Json& item : single) {
      if (item.is_object() && item.contains("SpecialToken")) {
        items.push_back(require_string(item["SpecialToken"], "id", where + ".single"));
      } else if (item.is_object() && item.contains("Sequence")) {
        items.emplace_back();
      } else {
        throw FormatError(where + ".single: expected SpecialToken or Sequence items, found " +
                          item.dump().substr(0, 60));
      }
    }
  } else {
    throw FormatError(where + ".single: expected an array or a string, found " + json_type_name(single));
  }
  SequenceTemplate t;
  bool seen_sequence = false;
  for (const std::string& item : items) {
    if (item.empty()) {
      if (seen_sequence)
        throw UnsupportedError(where + ".single: more than one sequence in the single template");
      seen_sequence = true;
      continue;
    }
    auto ids = special_ids(config, item, where);
    auto& dst = seen_sequence ? t.suffix : t.prefix;
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  if (!seen_sequence) throw FormatError(where + ".single: the template has no $A sequence");
  return t;
}

// BertProcessing / RobertaProcessing: "cls": ["[CLS]", 101], "sep": ["[SEP]", 102].
std::int32_t pair_id(const Json& config, const std::string& key, const std::string& where) {
  const Json& v = require_array(config, key, where);
  if (v.size() != 2 || !v[1].is_number_integer() || v[1].get<std::int64_t>() < 0) {
    throw FormatError(where + "." + key + ": expected [token, id], found " + v.dump().substr(0, 60));
  }
  return static_cast<std::int32_t>(v[1].get<std::int64_t>());
}

}  // namespace

SequenceTemplate read_post_processor(const Json& config, const std::string& where) {
  if (config.is_null()) return {};
  const std::string type = component_type(
      config, where, {"TemplateProcessing", "ByteLevel", "Sequence", "BertProcessing", "RobertaProcessing"});
  if (type == "TemplateProcessing") return read_template(config, where);
  if (type == "ByteLevel") return {};
  if (type == "Sequence") {
    const Json& list = require_array(config, "processors", where);
    SequenceTemplate all;
    for (std::size_t i = 0; i < list.size(); ++i) {
      SequenceTemplate t = read_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]");
      all.prefix.insert(all.prefix.end(), t.prefix.begin(), t.prefix.end());
      all.suffix.insert(all.suffix.end(), t.suffix.begin(), t.suffix.end());
    }
    return all;
  }
  return SequenceTemplate{{pair_id(config, "cls", where)}, {pair_id(config, "sep", where)}};
}

}  // namespace ctune::tok
