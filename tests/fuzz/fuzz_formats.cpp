// libFuzzer target: any bytes as a .safetensors file (its header parsed and validated against the
// file's size) and as a GGUF file image. A FormatError or UnsupportedError is how the readers
// refuse; anything else escaping, a sanitizer report or a hang is a finding. The first byte picks
// the reader, so each input exercises one of them fully. tests/formats' corruption fuzz flips
// bytes of valid files; this one is coverage-guided.
// Run with scripts/fuzz.sh formats (docs/testing.md#fuzzing).
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t* body = data + 1;
  const std::size_t n = size - 1;
  try {
    if (data[0] & 1) {
      (void)ctune::io::parse_gguf(body, n, "fuzz.gguf");
    } else {
      (void)ctune::io::parse_safetensors_header(body, n, n, "fuzz.safetensors");
    }
  } catch (const ctune::Error&) {
  }
  return 0;
}
