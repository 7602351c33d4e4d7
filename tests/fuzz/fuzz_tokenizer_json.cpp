// libFuzzer target: any bytes as a model directory's tokenizer.json (and, after a "\n\x01\x01\n"
// separator, its tokenizer_config.json), loaded as `ctune` loads a downloaded tokenizer. Checks:
// loading either succeeds or throws a ctune error (never a crash, a sanitizer report or a raw
// std:: exception); a loaded tokenizer encodes a fixed set of texts (special tokens mapped and as
// text) to ids inside its vocabulary, and decodes them without any but a ctune error.
// Run with scripts/fuzz.sh tokenizer_json (docs/testing.md#fuzzing).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

fs::path dir;

void write(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// Texts that reach every component: spaces and newlines, digits, punctuation, accents and
// combining marks (normalizers), an emoji and a CJK run (byte fallback), the special-token
// strings the seeds declare, and invalid UTF-8.
const std::vector<std::string> kTexts = {
    "",
    " hello world  \n\t123 4567 ab",
    "<s>a b</s><|im_start|>user\nhi<|im_end|>",
    "Caf\xC3\xA9 e\xCC\x81 \xF0\x9F\x98\x80 \xE4\xBD\xA0\xE5\xA5\xBD!?",
    "\xFF\xFE abc \xC3",
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dir = fs::temp_directory_path() / ("ctune-fuzz-tokenizer-json-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string_view sep = "\n\x01\x01\n";
  const auto cut = input.find(sep);
  write(dir / "tokenizer.json", input.substr(0, cut));
  fs::remove(dir / "tokenizer_config.json");
  if (cut != std::string_view::npos) write(dir / "tokenizer_config.json", input.substr(cut + sep.size()));
  std::unique_ptr<ctune::tok::Tokenizer> t;
  try {
    t = ctune::tok::load_tokenizer(dir);
  } catch (const ctune::Error&) {
    return 0;  // refused with a ctune error: what a bad file must give
  }
  for (const auto& text : kTexts) {
    for (const bool special_as_text : {false, true}) {
      std::vector<std::int32_t> ids;
      try {
        ids = t->encode(text, true, special_as_text);
      } catch (const ctune::Error&) {
        continue;
      }
      for (const auto id : ids)
        if (id < 0 || static_cast<std::size_t>(id) >= t->vocab_size()) __builtin_trap();
      try {
        (void)t->decode(ids, false);
        (void)t->decode(ids, true);
      } catch (const ctune::Error&) {
      }
    }
  }
  return 0;
}
