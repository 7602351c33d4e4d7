// SentencePiece tokenizer over libctune_spm.so. Control and unknown pieces are matched in the text
// (leftmost-longest, like Hugging Face's slow tokenizers split on their special tokens) and the
// segments between them are encoded by SentencePiece. Decoding mirrors that: runs of ordinary ids
// are decoded by SentencePiece, control/unknown ids become their piece text ("<s>") unless
// skip_special drops them.
#include "tokenizer/sentencepiece_tokenizer.h"

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/special_config.h"
#include "tokenizer/spm_library.h"
#include "tokenizer/unicode.h"

namespace ctune::tok {
namespace {
const char kProbe[] =
    "  Hello,\tworld\n\n  x  e\xCC\x81 \xC3\xA9 \xEF\xAC\x81 \xE4\xB8\xAD\xF0\x9F\x98\x80  ";
}

SentencePieceTokenizer::SentencePieceTokenizer(const std::filesystem::path& file) : where_(file.string()) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) throw IoError(where_ + ": cannot open for reading");
  lib_ = &spm_library();
  char err[512] = {0};
  handle_ = lib_->load(file.c_str(), err, sizeof err);
  if (!handle_) throw FormatError(err[0] ? std::string(err) : where_ + ": not a SentencePiece model");
  vocab_size_ = lib_->vocab_size(handle_);

  special_piece_.assign(static_cast<std::size_t>(vocab_size_), 0);
  std::vector<std::string> patterns;
  for (std::int32_t id = 0; id < vocab_size_; ++id) {
    int type = lib_->piece_type(handle_, id);
    if (type != CTUNE_SPM_CONTROL && type != CTUNE_SPM_UNKNOWN) continue;
    special_piece_[static_cast<std::size_t>(id)] = 1;
    AddedToken t;
    t.content = piece(id);
    t.id = id;
    t.special = true;
    if (!t.content.empty()) specials_.push_back(std::move(t));
  }
  std::vector<const AddedToken*> tokens;
  for (const AddedToken& t : specials_) {
    patterns.push_back(t.content);
    tokens.push_back(&t);
  }
  matcher_ = TokenMatcher(std::move(patterns), std::move(tokens));

  auto id_or_none = [](std::int32_t id) { return id >= 0 ? std::optional<std::int32_t>(id) : std::nullopt; };
  special_.bos = id_or_none(lib_->bos_id(handle_));
  special_.eos = id_or_none(lib_->eos_id(handle_));
  special_.pad = id_or_none(lib_->pad_id(handle_));
  special_.unk = id_or_none(lib_->unk_id(handle_));
  special_.add_bos = special_.bos.has_value();  // SentencePiece LMs (Llama-1/2) start with <s>
  special_.add_eos = false;
  apply_special_token_files(file.parent_path(), special_,
                            [this](std::string_view t) { return token_to_id(t); });

  std::vector<std::int32_t> probe_ids;
  encode_text(kProbe, probe_ids);
  lossless_ = decode_run(probe_ids) == kProbe;
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (handle_) lib_->free(handle_);
}

void SentencePieceTokenizer::encode_text(std::string_view text, std::vector<std::int32_t>& out) const {
  std::vector<std::int32_t> buf(text.size() + 8);
  long n = lib_->encode(handle_, text.data(), text.size(), buf.data(), buf.size());
  if (n > static_cast<long>(buf.size())) {
    buf.resize(static_cast<std::size_t>(n));
    n = lib_->encode(handle_, text.data(), text.size(), buf.data(), buf.size());
  }
  if (n < 0) throw FormatError(where_ + ": " + lib_->last_error(handle_));
  out.insert(out.end(), buf.begin(), buf.begin() + n);
}

std::vector<std::int32_t> SentencePieceTokenizer::encode_ordinary(std::string_view text, bool special_as_text) const {
  std::vector<std::int32_t> out;
  std::string repaired;
  if (find_invalid_utf8(text) != std::string_view::npos) {
    repaired = repair_utf8(text);
    text = repaired;
  }
  std::vector<Segment> segments;
  matcher_.split(text, segments);
  if (special_as_text) matcher_.special_as_text(segments);
  for (const Segment& s : segments) {
    if (s.token >= 0)
      out.push_back(matcher_.token(s.token).id);
    else
      encode_text(text.substr(s.begin, s.end - s.begin), out);
  }
  return out;
}

std::string SentencePieceTokenizer::decode_run(const std::vector<std::int32_t>& ids) const {
  if (ids.empty()) return std::string();
  std::string buf(ids.size() * 8 + 16, '\0');
  long n = lib_->decode(handle_, ids.data(), ids.size(), buf.data(), buf.size());
  if (n > static_cast<long>(buf.size())) {
    buf.resize(static_cast<std::size_t>(n));
    n = lib_->decode(handle_, ids.data(), ids.size(), buf.data(), buf.size());
  }
  if (n < 0) throw FormatError(where_ + ": " + lib_->last_error(handle_));
  buf.resize(static_cast<std::size_t>(n));
  return buf;
}

std::string SentencePieceTokenizer::decode(const std::vector<std::int32_t>& ids, bool skip_special) const {
  std::string out;
  std::vector<std::int32_t> run;
  for (std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      throw FormatError("decode: id " + std::to_string(id) + " is not in the vocabulary (size " +
                        std::to_string(vocab_size_) + ")");
    }
  }
  for (std::int32_t id : ids) {
    if (!special_piece_[static_cast<std::size_t>(id)]) {
      run.push_back(id);
      continue;
    }
    out += decode_run(run);
    run.clear();
    if (!skip_special) out += piece(id);
  }
  out += decode_run(run);
  return out;
}

std::string SentencePieceTokenizer::piece(std::int32_t id) const {
  std::string buf(64, '\0');
  long n = lib_->id_to_piece(handle_, id, buf.data(), buf.size());
  if (n > static_cast<long>(buf.size())) {
    buf.resize(static_cast<std::size_t>(n));
    n = lib_->id_to_piece(handle_, id, buf.data(), buf.size());
  }
  if (n < 0) throw FormatError("id_to_token: " + std::string(lib_->last_error(handle_)));
  buf.resize(static_cast<std::size_t>(n));
  return buf;
}

std::optional<std::int32_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  std::int32_t id = lib_->piece_to_id(handle_, token.data(), token.size());
  return id >= 0 ? std::optional<std::int32_t>(id) : std::nullopt;
}

std::vector<std::string> SentencePieceTokenizer::special_tokens() const {
  std::vector<std::string> out;
  for (const AddedToken& t : specials_) out.push_back(t.content);
  return out;
}

std::string SentencePieceTokenizer::id_to_token(std::int32_t id) const {
  if (id < 0 || id >= vocab_size_) {
    throw FormatError("id_to_token: id " + std::to_string(id) + " is not in the vocabulary (size " +
                      std::to_string(vocab_size_) + ")");
  }
  return piece(id);
}

}  // namespace ctune::tok
