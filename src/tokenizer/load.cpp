// load_tokenizer picks the implementation from what the path holds: tokenizer.json (preferred)
// or tokenizer.model in a directory, or a file of either kind (recognised by its first non-blank
// byte: '{' is JSON).
#include "tokenizer/load.h"

#include <fstream>

#include "core/error.h"
#include "core/regular_file.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace ctune::tok {

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

constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer.model"};  // in order of preference

bool has_tokenizer(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return true;
  for (const char* name : kTokenizerFiles)
    if (std::filesystem::exists(path / name, ec)) return true;
  return false;
}

std::filesystem::path tokenizer_file(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* name : kTokenizerFiles) {
    const auto file = dir / name;
    if (!std::filesystem::exists(file, ec)) continue;
    require_regular_file(file, "a tokenizer file");  // a link to /dev/zero or a FIFO: said so, never read
    return file;
  }
  throw IoError(dir.string() + ": no tokenizer.json or tokenizer.model in this directory");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path) {
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(path, ec);
  if (!dir && !std::filesystem::exists(path, ec)) throw IoError(path.string() + ": no such file or directory");
  const auto file = dir ? tokenizer_file(path) : path;
  require_regular_file(file, "a tokenizer file");
  if (dir) {
    if (file.filename() == "tokenizer.json") return std::make_unique<HfTokenizer>(file);
    return std::make_unique<SentencePieceTokenizer>(file);
  }
  if (path.extension() == ".json" || (path.extension() != ".model" && looks_like_json(path))) {
    return std::make_unique<HfTokenizer>(path);
  }
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace ctune::tok
