// Deterministic crash points for the kill tests. When the environment variable CTUNE_KILL_AT
// equals "<what>:<step>:<where>" (e.g. "step:8:mid", "checkpoint:6:files"), the process sends
// itself SIGKILL on reaching that point: a real, uncatchable death at a chosen moment, so the
// tests can prove that resume survives it. Without the variable this costs one string compare.
#pragma once

#include <cstdint>

namespace ctune {

void kill_point(const char* what, std::int64_t step, const char* where);

}  // namespace ctune
