// Thread-count policy (torch-free): LibTorch picks 1 thread on some machines, so ctune always
// sets the count explicitly, defaulting to the cores this process may run on.
#pragma once

#include <string>

namespace ctune {

// Cores available to this process (sched affinity), at least 1.
int available_cores();

// Parses a thread setting: "auto" -> available_cores(); an integer in 1..4096 -> itself.
// Throws ConfigError naming `where` otherwise.
int parse_thread_count(const std::string& value, const std::string& where);

}  // namespace ctune
