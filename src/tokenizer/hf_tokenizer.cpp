// tokenizer.json loading and the encode/decode pipeline. Order of operations matches the Rust
// crate: non-normalized added tokens are cut out of the raw text first; each remaining segment
// is normalized on its own (so Llama-2's Prepend("▁") applies per segment: "<s>hello" gives
// <s> then "▁hello"); normalized added tokens are cut out of the normalized segment; the rest is
// pre-tokenized and every word goes through the BPE model. Input that is not valid UTF-8 is
// repaired (U+FFFD) first rather than rejected, so a stray byte cannot abort a training run.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/component_json.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/special_config.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace ctune::tok {
namespace {

bool mentions_byte_level(const Json& config) {
  if (config.is_object()) {
    auto t = config.find("type");
    if (t != config.end() && t->is_string() && *t == "ByteLevel") return true;
    for (const auto& item : config.items())
      if (mentions_byte_level(item.value())) return true;
  } else if (config.is_array()) {
    for (const Json& item : config)
      if (mentions_byte_level(item)) return true;
  }
  return false;
}

const Json& section(const Json& root, const char* key) {
  static const Json null_value;
  auto it = root.find(key);
  return it == root.end() ? null_value : *it;
}

}  // namespace

HfTokenizer::HfTokenizer(const std::filesystem::path& file) {
  TokenizerJson doc = read_tokenizer_json(file);
  init(doc.root, file.string(), std::move(doc.tables));
  apply_special_token_files(file.parent_path(), special_,
                            [this](std::string_view t) { return token_to_id(t); });
}

HfTokenizer::HfTokenizer(const Json& root, const std::string& where) {
  init(root, where, std::nullopt);
}

void HfTokenizer::init(const Json& root, const std::string& where, std::optional<BpeTables> tables) {
  if (!root.is_object()) throw FormatError(where + ": expected a JSON object, found " + json_type_name(root));
  const Json& model = require_field(root, "model", where);
  // Files from older writers omit the type of a BPE model.
  if (!(model.is_object() && !model.contains("type") && model.contains("merges"))) {
    component_type(model, where + ": model", {"BPE"});
  }
  if (!tables) tables = BpeTables::from_json(model, where + ": model");
  model_ = std::make_unique<BpeModel>(model, where + ": model", std::move(*tables));
  normalizer_ = make_normalizer(section(root, "normalizer"), where + ": normalizer");
  pre_tokenizer_ = make_pre_tokenizer(section(root, "pre_tokenizer"), where + ": pre_tokenizer");
  decoder_ = make_decoder(section(root, "decoder"), where + ": decoder");
  const Json& added = section(root, "added_tokens");
  if (!added.is_null()) {
    if (!added.is_array())
      throw FormatError(where + ": added_tokens: expected an array, found " + json_type_name(added));
    read_added_tokens(added, where + ": added_tokens");
  }
  byte_level_ =
      mentions_byte_level(section(root, "pre_tokenizer")) || mentions_byte_level(section(root, "decoder"));

  if (model_->unk_token() && !model_->unk_resolved()) {
    auto it = added_by_content_.find(*model_->unk_token());
    if (it == added_by_content_.end()) {
      throw FormatError(where + ": model.unk_token \"" + *model_->unk_token() +
                        "\" is not in the vocabulary");
    }
    model_->set_unk_id(it->second);
  }
  if (model_->unk_token()) special_.unk = token_to_id(*model_->unk_token());

  const std::string pp_where = where + ": post_processor";
  SequenceTemplate tmpl = read_post_processor(section(root, "post_processor"), pp_where);
  if (tmpl.prefix.size() > 1 || tmpl.suffix.size() > 1) {
    throw UnsupportedError(pp_where + ": the single template adds " + std::to_string(tmpl.prefix.size()) +
                           " tokens before and " + std::to_string(tmpl.suffix.size()) +
                           " after the text (ctune supports at most one bos and one eos)");
  }
  for (std::int32_t id : tmpl.prefix) {
    if (!token_text(id))
      throw FormatError(pp_where + ": special token id " + std::to_string(id) + " is not in the vocabulary");
    special_.bos = id;
    special_.add_bos = true;
  }
  for (std::int32_t id : tmpl.suffix) {
    if (!token_text(id))
      throw FormatError(pp_where + ": special token id " + std::to_string(id) + " is not in the vocabulary");
    special_.eos = id;
    special_.add_eos = true;
  }
}

void HfTokenizer::read_added_tokens(const Json& list, const std::string& where) {
  added_.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const Json& e = list[i];
    AddedToken t;
    t.content = require_string(e, "content", w);
    auto id = json_int(e, "id", w);
    if (!id || *id < 0 || *id > INT32_MAX) throw FormatError(w + ": expected a non-negative integer \"id\"");
    t.id = static_cast<std::int32_t>(*id);
    t.special = optional_bool(e, "special", w, false);
    t.normalized = optional_bool(e, "normalized", w, !t.special);
    t.lstrip = optional_bool(e, "lstrip", w, false);
    t.rstrip = optional_bool(e, "rstrip", w, false);
    t.single_word = optional_bool(e, "single_word", w, false);
    if (t.content.empty()) continue;  // the Rust crate ignores empty added tokens too
    if (find_invalid_utf8(t.content) != std::string::npos)
      throw FormatError(w + ": content is not valid UTF-8");
    added_.push_back(std::move(t));
  }
  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<const AddedToken*> raw_tokens, norm_tokens;
  for (std::size_t k = 0; k < added_.size(); ++k) {
    const AddedToken& t = added_[k];
    added_by_content_.emplace(t.content, t.id);
    added_by_id_.emplace(t.id, k);
    if (t.normalized) {
      norm_patterns.push_back(normalizer_ ? normalizer_->normalize(t.content) : t.content);
      norm_tokens.push_back(&t);
    } else {
      raw_patterns.push_back(t.content);
      raw_tokens.push_back(&t);
    }
  }
  raw_matcher_ = TokenMatcher(std::move(raw_patterns), std::move(raw_tokens));
  normalized_matcher_ = TokenMatcher(std::move(norm_patterns), std::move(norm_tokens));
}

std::vector<std::int32_t> HfTokenizer::encode_ordinary(std::string_view text, bool special_as_text) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::string repaired;
  if (find_invalid_utf8(text) != std::string_view::npos) {
    repaired = repair_utf8(text);
    text = repaired;
  }
  if (raw_matcher_.empty()) {
    encode_segment(text, true, out);
    return out;
  }
  std::vector<Segment> segments;
  raw_matcher_.split(text, segments);
  if (special_as_text) raw_matcher_.special_as_text(segments);
  for (const Segment& s : segments) {
    if (s.token >= 0)
      out.push_back(raw_matcher_.token(s.token).id);
    else
      encode_segment(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
  }
  return out;
}

void HfTokenizer::encode_segment(std::string_view text, bool at_start, std::vector<std::int32_t>& out) const {
  std::string normalized;
  if (normalizer_) {
    normalized = normalizer_->normalize(text);
    text = normalized;
  }
  auto encode_piece = [&](std::string_view piece, bool piece_at_start) {
    if (piece.empty()) return;
    if (!pre_tokenizer_) {
      model_->encode_word(piece, out);
      return;
    }
    std::vector<PreToken> words{PreToken{std::string(piece), piece_at_start}};
    pre_tokenizer_->pre_tokenize(words);
    for (const PreToken& w : words) model_->encode_word(w.text, out);
  };
  if (normalized_matcher_.empty()) {
    encode_piece(text, at_start);
    return;
  }
  std::vector<Segment> segments;
  normalized_matcher_.split(text, segments);
  for (const Segment& s : segments) {
    if (s.token >= 0)
      out.push_back(normalized_matcher_.token(s.token).id);
    else
      encode_piece(text.substr(s.begin, s.end - s.begin), at_start && s.begin == 0);
  }
}

std::optional<std::string_view> HfTokenizer::token_text(std::int32_t id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return std::string_view(added_[it->second].content);
  if (const std::string_view* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

std::string HfTokenizer::decode(const std::vector<std::int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int32_t id : ids) {
    const std::optional<std::string_view> text = token_text(id);
    if (!text) {
      throw FormatError("decode: id " + std::to_string(id) + " is not in the vocabulary (size " +
                        std::to_string(vocab_size()) + ")");
    }
    if (skip_special) {
      auto it = added_by_id_.find(id);
      bool special = (it != added_by_id_.end() && added_[it->second].special) || id == special_.bos ||
                     id == special_.eos || id == special_.pad;
      if (special) continue;
    }
    tokens.emplace_back(*text);
  }
  std::string out;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
  } else {
    for (std::size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
  }
  return out;
}

std::size_t HfTokenizer::vocab_size() const {
  std::size_t n = model_->size();
  for (const AddedToken& t : added_) n = std::max(n, static_cast<std::size_t>(t.id) + 1);
  return n;
}

std::optional<std::int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  auto it = added_by_content_.find(std::string(token));
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

std::vector<std::string> HfTokenizer::special_tokens() const {
  std::vector<std::string> out;
  for (const AddedToken& t : added_)
    if (t.special) out.push_back(t.content);
  return out;
}

std::string HfTokenizer::id_to_token(std::int32_t id) const {
  const std::optional<std::string_view> t = token_text(id);
  if (!t)
    throw FormatError("id_to_token: id " + std::to_string(id) + " is not in the vocabulary (size " +
                      std::to_string(vocab_size()) + ")");
  return std::string(*t);
}

}  // namespace ctune::tok
