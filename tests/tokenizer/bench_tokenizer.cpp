// bench_tokenizer: encoding throughput of ctune's tokenizers, for scripts/bench_tokenizer.sh.
//   bench_tokenizer TOKENIZER_PATH TEXT_FILE [PASSES]
// Each line of TEXT_FILE is one document, encoded without special tokens. One warm-up pass (it
// fills the word cache, as the reference's first pass does), then PASSES timed passes; prints
// the best pass as "tokens=N bytes=B seconds=S tokens_per_s=T" on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: bench_tokenizer TOKENIZER_PATH TEXT_FILE [PASSES]\n";
    return 2;
  }
  try {
    auto t0 = std::chrono::steady_clock::now();
    auto tok = ctune::tok::load_tokenizer(argv[1]);
    double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) throw ctune::IoError(std::string(argv[2]) + ": cannot open for reading");
    std::vector<std::string> lines;
    std::size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      bytes += line.size();
      lines.push_back(std::move(line));
    }
    const int passes = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
    std::size_t tokens = 0;
    double best = 1e30;
    for (int pass = 0; pass <= passes; ++pass) {
      auto start = std::chrono::steady_clock::now();
      std::size_t n = 0;
      for (const std::string& line : lines) n += tok->encode(line, false).size();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (pass > 0) best = std::min(best, s);  // pass 0 is the warm-up
      tokens = n;
    }
    std::printf("tokens=%zu bytes=%zu seconds=%.4f tokens_per_s=%.0f load_s=%.3f\n", tokens, bytes, best,
                static_cast<double>(tokens) / best, load_s);
  } catch (const ctune::Error& e) {
    std::cerr << "bench_tokenizer: " << e.kind() << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
