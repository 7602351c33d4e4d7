// Unguessable names: staging files and directories (io::unique_tag) and the --nproc store's
// secret (dist/local_store.h) take their randomness from the kernel's getrandom(), never from
// the training RNG (whose state a checkpoint records and a resumed run must replay exactly).
#pragma once

#include <cstddef>
#include <string>

namespace ctune {

// 2 * bytes lowercase hex digits from getrandom(); IoError if the kernel refuses.
std::string random_hex(std::size_t bytes);

}  // namespace ctune
