// A scratch directory of this test process: CTest runs a binary's cases as parallel processes,
// so two cases writing and removing one shared directory would race (seen: a tokenizer case
// loading files its neighbour had just removed). Header-only, for the torch-free test binaries.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace ctune::test {

// `base`/scratch-<pid>, removed when the process exits; the first call's base is kept.
inline const std::filesystem::path& process_scratch_root(const std::filesystem::path& base) {
  static const std::filesystem::path root = base / ("scratch-" + std::to_string(::getpid()));
  struct RemoveAtExit {
    ~RemoveAtExit() {
      std::error_code ec;
      std::filesystem::remove_all(root, ec);
    }
  };
  static RemoveAtExit cleanup;
  return root;
}

}  // namespace ctune::test
