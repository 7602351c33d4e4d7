// The llama.cpp conformance cases: which tiny model (architecture, RoPE, tokenizer), which
// export, and what llama.cpp must reproduce. Shared by the preparation step (models, exports,
// one Node run) and the per-case checks of test_llama_cpp.cpp.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace ctune::exporter::test {

struct ConformanceCase {
  std::string name;
  std::string model;        // model directory under cases/ (see conformance_prepare.cpp)
  std::string adapter;      // PEFT adapter under cases/ applied by ctune's reference; "" none
  std::string gguf;         // the GGUF model llama.cpp loads (under cases/)
  std::string gguf_lora;    // a GGUF LoRA adapter llama.cpp applies; "" none
  std::string type = "f32"; // --type of the model export
  bool tokenization = false;     // also compare llama.cpp's tokenizer with ctune's
};

const std::vector<ConformanceCase>& conformance_cases();

// gtest prints a parameter in the test's description (and CTest's discovered name): the name.
inline void PrintTo(const ConformanceCase& c, std::ostream* os) { *os << c.name; }

// Texts whose tokenization is compared (ASCII and NFC text: llama.cpp does not normalize).
const std::vector<std::string>& tokenization_texts();

inline constexpr int kGenerate = 40;      // greedy tokens requested from llama.cpp
inline constexpr int kMinGreedy = 32;     // at least this many must match ctune's
inline constexpr int kTopLargeVocab = 256;  // probabilities reported per step for large vocabularies

}  // namespace ctune::exporter::test
