// The Tokenizer base (encode = encode_ordinary + bos/eos) and load_tokenizer, which picks the
// implementation from what the path holds: tokenizer.json (preferred) or tokenizer.model in a
// directory, or a file of either kind (recognised by its first non-blank byte: '{' is JSON).
#include "tokenizer/tokenizer.h"

#include <fstream>

#include "core/error.h"
#include "core/regular_file.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace ctune::tok {

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool special_as_text) const {
  std::vector<std::int32_t> ids = encode_ordinary(text, special_as_text);
  if (!add_special) return ids;
  if (special_.add_bos && special_.bos) ids.insert(ids.begin(), *special_.bos);
  if (special_.add_eos && special_.eos) ids.push_back(*special_.eos);
  return ids;
}

namespace {
bool looks_like_json(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open for reading");
  char c;
  while (in.get(c)) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '{';
  }
  return false;
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const auto json = path / "tokenizer.json";
    const auto model = path / "tokenizer.model";
    // Present but not a regular file (a link to /dev/zero, a FIFO): said so, never read.
    for (const auto& file : {json, model})
      if (std::filesystem::exists(file, ec)) require_regular_file(file, "a tokenizer file");
    if (std::filesystem::is_regular_file(json, ec)) return std::make_unique<HfTokenizer>(json);
    if (std::filesystem::is_regular_file(model, ec)) return std::make_unique<SentencePieceTokenizer>(model);
    throw IoError(path.string() + ": no tokenizer.json or tokenizer.model in this directory");
  }
  if (!std::filesystem::exists(path, ec)) throw IoError(path.string() + ": no such file or directory");
  require_regular_file(path, "a tokenizer file");
  if (path.extension() == ".json" || (path.extension() != ".model" && looks_like_json(path))) {
    return std::make_unique<HfTokenizer>(path);
  }
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace ctune::tok
