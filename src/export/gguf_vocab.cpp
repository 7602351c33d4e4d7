// Building GgufVocab from tokenizer.json (via the tokenizer layer's streaming reader, so
// Llama-3's 9 MB file never becomes a full JSON DOM) or from tokenizer.model (via
// spm_model_file.h), then padding to the model's vocab_size and checking that every token
// string is unique (llama.cpp asserts on duplicates).
#include "export/gguf_vocab.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "data/chat_format.h"
#include "export/pre_tokenizer_names.h"
#include "export/spm_model_file.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace ctune::exporter {
namespace fs = std::filesystem;

namespace {

const char kMetaspace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

// Per-id slots while the vocabulary is assembled.
struct Slots {
  std::vector<std::optional<std::string>> tokens;
  std::vector<std::int32_t> types;
  std::vector<float> scores;
  explicit Slots(std::size_t n) : tokens(n), types(n, kNormal), scores(n, 0.0f) {}

  void put(std::int64_t id, std::string text, std::int32_t type, std::int64_t vocab_size, const std::string& where) {
    if (id < 0 || id >= vocab_size)
      throw ConfigError(where + ": token id " + std::to_string(id) + " is outside the model's vocab_size " +
                        std::to_string(vocab_size) + " (expected a tokenizer no larger than the embedding)");
    tokens[static_cast<std::size_t>(id)] = std::move(text);
    types[static_cast<std::size_t>(id)] = type;
  }
};

bool is_byte_token(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

// Whether a SentencePiece-style tokenizer.json prepends "▁" to the text (Prepend normalizer, or
// a Metaspace pre-tokenizer that adds a prefix space).
bool adds_space_prefix(const Json& root) {
  const std::string norm = root.contains("normalizer") ? root["normalizer"].dump() : "";
  if (norm.find("\"Prepend\"") != std::string::npos && norm.find(kMetaspace) != std::string::npos) return true;
  const Json pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : Json();
  const std::string text = pre.dump();
  if (text.find("\"Metaspace\"") == std::string::npos) return false;
  return text.find("\"prepend_scheme\":\"always\"") != std::string::npos ||
         text.find("\"prepend_scheme\":\"first\"") != std::string::npos ||
         text.find("\"add_prefix_space\":true") != std::string::npos;
}

void from_tokenizer_json(const fs::path& file, bool byte_level, std::int64_t vocab_size, GgufVocab& v, Slots& s) {
  const std::string where = file.string();
  tok::TokenizerJson doc = tok::read_tokenizer_json(file);
  const Json& root = doc.root;
  const Json& model = root.contains("model") ? root["model"] : Json();
  for (const auto& t : doc.tables.vocab) s.put(t.id, std::string(doc.tables.text(t.offset, t.size)), kNormal, vocab_size, where);

  if (byte_level) {
    v.model = "gpt2";
    v.pre = llama_cpp_pre_tokenizer(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : Json(), where + ": pre_tokenizer");
    v.merges.reserve(doc.tables.merges.size());
    for (const auto& m : doc.tables.merges) {
      v.merges.push_back(std::string(doc.tables.text(m.left_offset, m.left_size)) + " " +
                         std::string(doc.tables.text(m.right_offset, m.right_size)));
    }
  } else {
    const bool byte_fallback = model.is_object() && model.contains("byte_fallback") &&
                               model["byte_fallback"].is_boolean() && model["byte_fallback"].get<bool>();
    const std::string conventions = (root.contains("normalizer") ? root["normalizer"].dump() : "") +
                                    (root.contains("pre_tokenizer") ? root["pre_tokenizer"].dump() : "");
    if (!byte_fallback && conventions.find(kMetaspace) == std::string::npos)
      throw UnsupportedError(where + ": a BPE tokenizer that is neither byte-level nor SentencePiece-style (no \"" +
                             std::string(kMetaspace) + "\" and no byte_fallback) has no llama.cpp tokenizer");
    v.model = "llama";
    v.add_space_prefix = adds_space_prefix(root);
    v.remove_extra_whitespaces = false;
    std::unordered_map<std::string, std::int64_t> id_of;
    for (const auto& t : doc.tables.vocab) id_of.emplace(std::string(doc.tables.text(t.offset, t.size)), t.id);
    // llama.cpp's SentencePiece merge loop joins the adjacent pair whose result scores highest:
    // scoring each token by minus the rank of its first merge reproduces the BPE merge order.
    std::vector<bool> scored(s.scores.size(), false);
    for (std::size_t rank = 0; rank < doc.tables.merges.size(); ++rank) {
      const auto& m = doc.tables.merges[rank];
      auto it = id_of.find(std::string(doc.tables.text(m.left_offset, m.left_size)) +
                           std::string(doc.tables.text(m.right_offset, m.right_size)));
      if (it == id_of.end()) continue;
      const auto id = static_cast<std::size_t>(it->second);
      if (!scored[id]) s.scores[id] = -static_cast<float>(rank);
      scored[id] = true;
    }
    for (std::size_t id = 0; id < s.tokens.size(); ++id)
      if (byte_fallback && s.tokens[id] && is_byte_token(*s.tokens[id])) s.types[id] = kByte;
    if (model.is_object() && model.contains("unk_token") && model["unk_token"].is_string()) {
      auto it = id_of.find(model["unk_token"].get<std::string>());
      if (it != id_of.end()) s.types[static_cast<std::size_t>(it->second)] = kUnknown;
    }
  }
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const Json& a : root["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        throw FormatError(where + ": added_tokens entries need an integer \"id\" and a string \"content\"");
      const auto id = a["id"].get<std::int64_t>();
      const bool special = a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>();
      const bool was_unknown = id >= 0 && id < vocab_size && s.types[static_cast<std::size_t>(id)] == kUnknown;
      s.put(id, a["content"].get<std::string>(), was_unknown ? kUnknown : (special ? kControl : kUserDefined), vocab_size, where);
    }
  }
}

void from_spm_model(const fs::path& file, std::int64_t vocab_size, GgufVocab& v, Slots& s) {
  const SpmModelFile m = read_spm_model_file(file);
  if (m.model_type != 2) {
    throw UnsupportedError(file.string() + ": SentencePiece model type " + std::to_string(m.model_type) +
                           (m.model_type == 1 ? " (unigram)" : "") +
                           " is not exported (llama.cpp's \"llama\" tokenizer reproduces SentencePiece BPE only)");
  }
  v.model = "llama";
  v.add_space_prefix = m.add_dummy_prefix;
  v.remove_extra_whitespaces = m.remove_extra_whitespaces;
  for (std::size_t id = 0; id < m.pieces.size(); ++id) {
    s.put(static_cast<std::int64_t>(id), m.pieces[id].piece, m.pieces[id].type, vocab_size, file.string());
    s.scores[id] = m.pieces[id].score;
  }
}

}  // namespace

GgufVocab read_gguf_vocab(const fs::path& model_dir, const model::ModelConfig& config) {
  fs::path file;
  try {
    file = tok::tokenizer_file(model_dir);  // the file the tokenizer itself is read from
  } catch (const IoError& e) {
    throw IoError(std::string(e.what()) + " (a GGUF file carries the tokenizer)");
  }
  const auto tokenizer = tok::load_tokenizer(model_dir);

  GgufVocab v;
  v.source = file.string();
  const std::int64_t vocab_size = config.vocab_size;
  Slots s(static_cast<std::size_t>(vocab_size));
  if (file.filename() == "tokenizer.json")
    from_tokenizer_json(file, tokenizer->kind() == "bpe-byte-level", vocab_size, v, s);
  else
    from_spm_model(file, vocab_size, v, s);

  // Ids the tokenizer leaves unused, up to the embedding size.
  std::size_t padded = 0;
  std::unordered_map<std::string, std::size_t> seen;
  for (std::size_t id = 0; id < s.tokens.size(); ++id) {
    if (!s.tokens[id]) {
      s.tokens[id] = "[PAD" + std::to_string(id) + "]";
      s.types[id] = kUnused;
      ++padded;
    }
    auto [it, fresh] = seen.emplace(*s.tokens[id], id);
    if (!fresh)
      throw ConfigError(v.source + ": ids " + std::to_string(it->second) + " and " + std::to_string(id) +
                        " share the token string \"" + *s.tokens[id] + "\" (llama.cpp requires unique tokens)");
  }
  if (padded) spdlog::debug("GGUF vocabulary: {} unused ids up to vocab_size {} written as [PAD<id>]", padded, vocab_size);
  v.tokens.reserve(s.tokens.size());
  for (auto& t : s.tokens) v.tokens.push_back(std::move(*t));
  v.types = std::move(s.types);
  if (v.model == "llama") v.scores = std::move(s.scores);

  const tok::SpecialTokens& special = tokenizer->special();
  v.bos = special.bos;
  v.eos = special.eos;
  v.unk = special.unk;
  v.pad = special.pad;
  if (!v.bos && config.bos_token_id) v.bos = static_cast<std::int32_t>(*config.bos_token_id);
  if (!v.eos && !config.eos_token_ids.empty()) v.eos = static_cast<std::int32_t>(config.eos_token_ids.front());
  v.add_bos = special.add_bos;
  v.add_eos = special.add_eos;
  v.chat_template = data::read_chat_template(model_dir);
  return v;
}

void write_vocab_metadata(io::GgufWriter& w, const GgufVocab& v) {
  using io::GgufValue;
  w.set("tokenizer.ggml.model", GgufValue::string(v.model));
  if (v.model == "gpt2") w.set("tokenizer.ggml.pre", GgufValue::string(v.pre));
  w.set("tokenizer.ggml.tokens", GgufValue::strings(v.tokens));
  if (!v.scores.empty()) w.set("tokenizer.ggml.scores", GgufValue::f32_array(v.scores));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(v.types));
  if (v.model == "gpt2") w.set("tokenizer.ggml.merges", GgufValue::strings(v.merges));
  auto put_id = [&](const char* key, const std::optional<std::int32_t>& id) {
    if (id) w.set(key, GgufValue::u32(static_cast<std::uint32_t>(*id)));
  };
  put_id("tokenizer.ggml.bos_token_id", v.bos);
  put_id("tokenizer.ggml.eos_token_id", v.eos);
  put_id("tokenizer.ggml.unknown_token_id", v.unk);
  put_id("tokenizer.ggml.padding_token_id", v.pad);
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(v.add_bos));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(v.add_eos));
  if (v.add_space_prefix) w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(*v.add_space_prefix));
  if (v.remove_extra_whitespaces)
    w.set("tokenizer.ggml.remove_extra_whitespaces", GgufValue::boolean(*v.remove_extra_whitespaces));
  if (v.chat_template) w.set("tokenizer.chat_template", GgufValue::string(*v.chat_template));
}

std::string llama_cpp_loadable_name(const std::string& name, const GgufVocab& vocab) {
  std::string lower = name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower.find("phi3") == std::string::npos && lower.find("phi-3") == std::string::npos) return name;
  const std::set<std::string> tokens(vocab.tokens.begin(), vocab.tokens.end());
  bool complete = true;
  for (const char* t : {"</s>", "<unk>", "<s>", "<|endoftext|>"}) complete = complete && tokens.count(t);
  if (complete) return name;
  std::string out = name;
  for (std::size_t i = 0; i + 3 < out.size(); ++i) {
    if (lower.compare(i, 4, "phi3") == 0) out.insert(i + 3, 1, '_'), lower.insert(i + 3, 1, '_');
    else if (lower.compare(i, 5, "phi-3") == 0) out[i + 3] = '_', lower[i + 3] = '_';
  }
  spdlog::info("general.name \"{}\" written as \"{}\": llama.cpp reads a name with phi3 / phi-3 as Phi-3's vocabulary, "
               "which this one is not", name, out);
  return out;
}

}  // namespace ctune::exporter
