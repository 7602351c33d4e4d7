// Applying a tokenizer's chat template and locating what trains; see chat_template.h.
#include "data/chat_template.h"

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "core/regular_file.h"
#include "template/pystr.h"

namespace ctune::data {

namespace {

// A template file, refused before reading when it is not a regular file or is larger than any
// template the engine accepts.
std::string read_text(const std::filesystem::path& path) {
  require_regular_file(path, "a chat template file");
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > tmpl::kMaxSourceBytes)
    throw FormatError(path.string() + ": " + std::to_string(size) + " bytes, more than a chat template may have (" +
                      std::to_string(tmpl::kMaxSourceBytes) + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open for reading");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A tokenizer_config token entry: "<s>" or {"content": "<s>", ...}.
std::optional<std::string> token_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

bool contains_ci(const std::string& s, const char* word) {
  return tmpl::py_lower(s).find(word) != std::string::npos;
}

}  // namespace

std::map<std::string, std::string> read_chat_templates(const std::filesystem::path& dir) {
  std::map<std::string, std::string> out;
  if (dir.empty()) return out;
  std::error_code ec;
  const auto config = dir / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(config, ec)) {
    const Json root = read_json_file(config);
    auto it = root.find("chat_template");
    if (it != root.end() && !it->is_null()) {
      if (it->is_string()) {
        out["default"] = it->get<std::string>();
      } else if (it->is_array()) {
        for (const Json& entry : *it) {
          if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
              !entry["template"].is_string())
            throw FormatError(config.string() + ": chat_template list entries must be {\"name\": ..., \"template\": ...}");
          out[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
        }
      } else {
        throw FormatError(config.string() + ": chat_template expected a string or a list, found " + json_type_name(*it));
      }
    }
  }
  // Newer transformers write templates beside the config; a file wins over the config entry.
  if (const auto jinja = dir / "chat_template.jinja"; std::filesystem::is_regular_file(jinja, ec))
    out["default"] = read_text(jinja);
  if (const auto extra = dir / "additional_chat_templates"; std::filesystem::is_directory(extra, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(extra, ec))
      if (e.path().extension() == ".jinja" && e.is_regular_file(ec)) out[e.path().stem().string()] = read_text(e.path());
  }
  return out;
}

ChatRecord parse_chat_record(const OrderedJson& record, const std::string& messages_column,
                             const std::string& tools_column, const std::string& where) {
  ChatRecord out;
  auto it = record.find(messages_column);
  bool sharegpt = false;
  if (it == record.end()) {
    it = record.find("conversations");
    sharegpt = it != record.end();
  }
  if (it == record.end())
    throw FormatError(where + ": missing key \"" + messages_column +
                      "\" (data.columns.messages), and no ShareGPT \"conversations\" list");
  const std::string column = sharegpt ? "conversations" : messages_column;
  if (!it->is_array())
    throw FormatError(where + ": key \"" + column + "\" expected a list of messages, found " + json_type_name(*it));
  if (it->empty()) throw FormatError(where + ": " + column + " is empty");
  out.messages = OrderedJson::array();
  for (std::size_t i = 0; i < it->size(); ++i) {
    const OrderedJson& m = (*it)[i];
    const std::string at = where + ": " + column + "[" + std::to_string(i) + "]";
    if (!m.is_object()) throw FormatError(at + ": expected an object, found " + json_type_name(m));
    OrderedJson msg = OrderedJson::object();
    bool train = true;
    if (sharegpt) {
      auto from = m.find("from");
      auto value = m.find("value");
      if (from == m.end() || !from->is_string()) throw FormatError(at + ": expected a string \"from\"");
      if (value == m.end() || !value->is_string()) throw FormatError(at + ": expected a string \"value\"");
      const std::string f = from->get<std::string>();
      std::string role;
      if (f == "human" || f == "user") role = "user";
      else if (f == "gpt" || f == "assistant" || f == "model") role = "assistant";
      else if (f == "system") role = "system";
      else if (f == "tool" || f == "function" || f == "observation" || f == "function_response") role = "tool";
      else throw FormatError(at + ".from: unknown speaker \"" + f + "\" (expected human | gpt | system | tool)");
      msg["role"] = role;
      msg["content"] = *value;
      if (auto t = m.find("train"); t != m.end()) {
        if (!t->is_boolean()) throw FormatError(at + ".train: expected true or false, found " + json_type_name(*t));
        train = t->get<bool>();
      }
    } else {
      for (auto kv = m.begin(); kv != m.end(); ++kv) {
        // "train" stays in the message too: the template sees the record as transformers would.
        if (kv.key() == "train") {
          if (!kv.value().is_boolean()) throw FormatError(at + ".train: expected true or false, found " + json_type_name(kv.value()));
          train = kv.value().get<bool>();
        }
        msg[kv.key()] = kv.value();
      }
      auto role = msg.find("role");
      if (role == msg.end()) throw FormatError(at + ": missing key \"role\"");
      if (!role->is_string()) throw FormatError(at + ".role: expected a string, found " + json_type_name(*role));
      auto content = msg.find("content");
      if (content != msg.end() && !content->is_string() && !content->is_array() && !content->is_null())
        throw FormatError(at + ".content: expected a string, a list of parts or null, found " + json_type_name(*content));
    }
    out.messages.push_back(std::move(msg));
    out.trainable.push_back(train);
  }
  out.tools = nullptr;
  if (auto t = record.find(tools_column); t != record.end() && !t->is_null()) {
    if (t->is_string()) out.tools = parse_json_ordered(t->get<std::string>(), where + ": " + tools_column);
    else out.tools = *t;
    if (!out.tools.is_array())
      throw FormatError(where + ": key \"" + tools_column + "\" expected a list of tool schemas, found " +
                        json_type_name(out.tools));
  }
  return out;
}

ChatTemplate::ChatTemplate(const std::map<std::string, std::string>& templates, const std::string& choice,
                           const std::filesystem::path& tokenizer_dir, const tok::Tokenizer& tokenizer,
                           const OrderedJson& kwargs) {
  auto named = [&](const std::string& n) -> const std::string* {
    auto it = templates.find(n);
    return it == templates.end() ? nullptr : &it->second;
  };
  std::string names;
  for (const auto& [n, s] : templates) names += (names.empty() ? "" : ", ") + n;
  if (choice.empty()) {
    const std::string* d = named("default");
    if (!d)
      throw ConfigError(templates.empty() ? "the tokenizer has no chat_template (set data.chat_format to a native format, "
                                            "or data.chat_template to a .jinja file)"
                                          : "the tokenizer's chat templates have no \"default\" (it has: " + names +
                                                "); set data.chat_template to one of them");
    name_ = "default";
    main_ = std::make_shared<tmpl::Template>(*d);
    if (const std::string* t = named("tool_use")) tool_use_ = std::make_shared<tmpl::Template>(*t);
  } else if (const std::string* s = named(choice)) {
    name_ = choice;
    main_ = std::make_shared<tmpl::Template>(*s);
  } else {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(choice, ec))
      throw ConfigError("data.chat_template: \"" + choice + "\" is neither a template of the tokenizer" +
                        (names.empty() ? std::string(" (it has none)") : " (it has: " + names + ")") + " nor a file");
    name_ = choice;
    main_ = std::make_shared<tmpl::Template>(read_text(choice));
  }

  // The special tokens by name, as transformers passes its special_tokens_map.
  std::error_code ec;
  if (const auto config = tokenizer_dir / "tokenizer_config.json"; !tokenizer_dir.empty() &&
                                                                     std::filesystem::is_regular_file(config, ec)) {
    const Json root = read_json_file(config);
    for (const auto& [k, v] : root.items()) {
      if (k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0) {
        if (auto t = token_text(v)) variables_.set(k, tmpl::Value(*t));
      } else if (k == "extra_special_tokens" && v.is_object()) {  // model-specific names (Gemma 3's boi_token)
        for (const auto& [name, x] : v.items())
          if (auto t = token_text(x)) variables_.set(name, tmpl::Value(*t));
      } else if (k == "additional_special_tokens" && v.is_array()) {
        auto list = std::make_shared<tmpl::List>();
        for (const Json& x : v)
          if (auto t = token_text(x)) list->emplace_back(*t);
        variables_.set(k, tmpl::Value(list));
      }
    }
  }
  // Tokens the tokenizer itself knows (a config without *_token keys).
  const tok::SpecialTokens& sp = tokenizer.special();
  if (sp.bos && !variables_.find("bos_token")) variables_.set("bos_token", tmpl::Value(tokenizer.id_to_token(*sp.bos)));
  if (sp.eos && !variables_.find("eos_token")) variables_.set("eos_token", tmpl::Value(tokenizer.id_to_token(*sp.eos)));
  for (const auto& [k, v] : kwargs.items()) variables_.set(k, tmpl::from_json(v));

  if (const tmpl::Value* eos = variables_.find("eos_token"); eos && eos->is_string() && !eos->str_ref().empty())
    end_tokens_.push_back(eos->str_ref());
  for (const std::string& t : tokenizer.special_tokens())
    if ((contains_ci(t, "end") || contains_ci(t, "eot")) && !contains_ci(t, "header")) end_tokens_.push_back(t);  // not <|end_header_id|>
  end_tokens_.push_back("</s>");
  // Longest first, so that the longest token at a position wins.
  std::sort(end_tokens_.begin(), end_tokens_.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  end_tokens_.erase(std::unique(end_tokens_.begin(), end_tokens_.end()), end_tokens_.end());
}

const tmpl::Template& ChatTemplate::pick(const OrderedJson& tools) const {
  return tool_use_ && !tools.is_null() ? *tool_use_ : *main_;
}

tmpl::Rendered ChatTemplate::render_values(const tmpl::Value& messages, const tmpl::Value& tools,
                                           const OrderedJson& tools_json, bool add_generation_prompt) const {
  tmpl::Dict vars;
  vars.set("messages", messages);
  vars.set("tools", tools);
  vars.set("documents", tmpl::Value::none());
  vars.set("add_generation_prompt", tmpl::Value(add_generation_prompt));
  for (const auto& [k, v] : variables_.items()) vars.set(k, v);
  return pick(tools_json).render(vars, options_);
}

std::string ChatTemplate::render(const OrderedJson& messages, const OrderedJson& tools, bool add_generation_prompt) const {
  return render_values(tmpl::from_json(messages), tmpl::from_json(tools), tools, add_generation_prompt).text;
}

namespace {

// A message with every field the assistant writes replaced by `sentinel`.
OrderedJson with_sentinel(const OrderedJson& message, const std::string& sentinel) {
  OrderedJson out = message;
  OrderedJson& m = out;
  if (auto c = m.find("content"); c != m.end()) {
    if (c->is_string()) {
      *c = sentinel;
    } else if (c->is_array()) {
      for (auto& part : *c)
        if (part.is_object() && part.value("type", "") == "text") part["text"] = sentinel;
    }
  }
  if (auto r = m.find("reasoning_content"); r != m.end() && r->is_string()) *r = sentinel;
  if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
    for (auto& call : *calls) {
      if (!call.is_object()) continue;
      OrderedJson* fn = call.contains("function") && call["function"].is_object() ? &call["function"] : &call;
      if (fn->contains("name")) (*fn)["name"] = sentinel;
      if (auto a = fn->find("arguments"); a != fn->end()) {
        if (a->is_object()) *a = OrderedJson{{"_", sentinel}};
        else *a = sentinel;
      }
    }
  }
  return out;
}

}  // namespace

// Private-use characters: tojson and every string filter keep them as they are.
constexpr const char* kSentinelA = "\xEE\x80\x80";  // U+E000
constexpr const char* kSentinelB = "\xEE\x80\x81";  // U+E001

std::optional<ChatTemplate::Region> ChatTemplate::changed_region(const Converted& c, std::size_t index) const {
  const std::string& full = c.text;
  // The conversation with message `index` replaced; the other messages' values are shared.
  auto variant = [&](const char* sentinel) {
    auto list = std::make_shared<tmpl::List>(c.messages.list());
    (*list)[index] = tmpl::from_json(with_sentinel(c.record.messages[index], sentinel));
    return render_values(tmpl::Value(list), c.tools, c.record.tools, false).text;
  };
  const std::string a = variant(kSentinelA);
  const std::string b = variant(kSentinelB);
  if (a == b) return std::nullopt;  // nothing of the message is rendered
  // The common prefix and suffix of all three renderings bound what the message changes.
  const std::size_t limit = std::min({full.size(), a.size(), b.size()});
  std::size_t p = 0;
  while (p < limit && full[p] == a[p] && a[p] == b[p]) ++p;
  std::size_t s = 0;
  while (s < limit - p && full[full.size() - 1 - s] == a[a.size() - 1 - s] && a[a.size() - 1 - s] == b[b.size() - 1 - s])
    ++s;
  // The sentinels differ in their last byte: keep cuts on code point boundaries of the text.
  auto boundary = [&](std::size_t i) { return i >= full.size() || (static_cast<unsigned char>(full[i]) & 0xC0) != 0x80; };
  while (p > 0 && !boundary(p)) --p;
  std::size_t e = full.size() - s;
  while (e < full.size() && !boundary(e)) ++e;
  s = full.size() - e;
  const bool single = a.compare(p, a.size() - s - p, kSentinelA) == 0 && b.compare(p, b.size() - s - p, kSentinelB) == 0;
  return Region{p, e, single};
}

std::optional<ChatTemplate::Region> ChatTemplate::region(Converted& c, std::size_t index) const {
  if (!c.regions[index]) c.regions[index] = changed_region(c, index);
  return *c.regions[index];
}

std::optional<std::size_t> ChatTemplate::rendered_neighbour(Converted& c, std::size_t index, int step) const {
  const auto delta = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(step));
  for (std::size_t j = index + delta; j < c.record.messages.size(); j += delta)  // 0 - 1 wraps to SIZE_MAX: the end
    if (region(c, j)) return j;
  return std::nullopt;
}

// A template can write an assistant's fields (or what it makes of them) at more than one place:
// its content again as a summary before the system turn. The region then runs from the first
// place to the last, over the turns between, and training it would train the prompt. A
// neighbour's region that begins or ends inside this one is text of that neighbour inside it.
// A single region is one sentinel alone and holds nothing else, so it needs no renders more.
std::optional<std::size_t> ChatTemplate::neighbour_inside(Converted& c, std::size_t index, const Region& r) const {
  if (r.single) return std::nullopt;
  const auto inside = [&](const Region& n) {
    if (n.begin == n.end) return r.begin < n.begin && n.begin < r.end;  // an empty field: its place
    return (r.begin <= n.begin && n.begin < r.end) || (r.begin < n.end && n.end <= r.end);
  };
  for (const int step : {-1, 1})
    if (const auto j = rendered_neighbour(c, index, step); j && inside(*region(c, *j))) return j;
  return std::nullopt;
}

std::size_t ChatTemplate::end_of_turn(Converted& c, std::size_t index, std::size_t at) const {
  const std::string& text = c.text;
  // Right after the message (whitespace between): the usual case.
  std::size_t i = at;
  while (i < text.size()) {
    std::size_t next = i;
    if (!tmpl::is_py_space(tmpl::decode_code_point(text, next))) break;
    i = next;
  }
  for (const std::string& t : end_tokens_)
    if (text.compare(i, t.size(), t) == 0) return i + t.size();
  // Text the template writes after the message's own fields (the closing of a tool call):
  // the first end-of-turn token before the next message that renders begins.
  std::size_t bound = text.size();
  if (const auto next = rendered_neighbour(c, index, 1)) bound = region(c, *next)->begin;
  for (std::size_t k = at; k < bound; ++k)
    for (const std::string& t : end_tokens_)
      if (k + t.size() <= bound && text.compare(k, t.size(), t) == 0) return k + t.size();
  return at;
}

ChatTemplate::Text ChatTemplate::render_record(const ChatRecord& record, const std::string& where, bool with_spans) const {
  Text out;
  try {
    Converted c{record, tmpl::from_json(record.messages), tmpl::from_json(record.tools), {}, {}};
    c.regions.resize(record.messages.size());
    const tmpl::Template& t = pick(record.tools);
    tmpl::Rendered r = render_values(c.messages, c.tools, record.tools, false);
    c.text = std::move(r.text);
    if (with_spans && t.has_generation()) {
      for (auto [b, e] : r.generation) {
        if (!out.spans.empty() && out.spans.back().second >= b) out.spans.back().second = std::max(out.spans.back().second, e);
        else out.spans.emplace_back(b, e);
      }
    } else if (with_spans) {
      for (std::size_t i = 0; i < record.messages.size(); ++i) {
        const auto& m = record.messages[i];
        if (!record.trainable[i] || m.value("role", "") != "assistant") continue;
        const auto part = region(c, i);
        if (!part) continue;
        if (const auto j = neighbour_inside(c, i, *part))
          throw FormatError(where + ": chat template (" + name_ + "): messages[" + std::to_string(i) +
                            "] (assistant) is written on both sides of messages[" + std::to_string(*j) + "] (" +
                            record.messages[*j].value("role", "?") +
                            "), so its trained tokens would take in that turn; refused (a template with {% generation %} "
                            "blocks marks what trains itself; or set data.train_on_input)");
        const std::size_t end = end_of_turn(c, i, part->end);
        if (end > part->begin) out.spans.emplace_back(part->begin, end);
      }
      std::sort(out.spans.begin(), out.spans.end());
    }
    out.text = std::move(c.text);
  } catch (const TemplateError& e) {
    throw FormatError(where + ": chat template (" + name_ + "): " + e.what());
  }
  return out;
}

ChatTemplate::Text ChatTemplate::render_with_spans(const ChatRecord& record, const std::string& where) const {
  return render_record(record, where, /*with_spans=*/true);
}

Rendered ChatTemplate::render_training(const ChatRecord& record, bool train_on_input, const std::string& where) const {
  // Under train_on_input every token trains: the spans, and the renders that find them, are not needed.
  const Text t = render_record(record, where, /*with_spans=*/!train_on_input);
  Rendered r;
  r.set_parse_special(true);
  std::size_t at = 0;
  for (auto [b, e] : t.spans) {
    if (b < at) b = at;
    if (e <= b) continue;
    r.text(std::string_view(t.text).substr(at, b - at), false);
    r.text(std::string_view(t.text).substr(b, e - b), true);
    at = e;
  }
  r.text(std::string_view(t.text).substr(at), false);
  if (train_on_input) r.train_all();
  return r;
}

}  // namespace ctune::data
