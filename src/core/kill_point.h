// Deterministic crash points for the kill tests. When the environment variable CTUNE_KILL_AT
// names "<what>:<step>:<where>" (e.g. "step:8:mid", "checkpoint:6:state"), the process sends
// itself SIGKILL on reaching that point: a real, uncatchable death at a chosen moment, so the
// tests can prove that resume survives it. "<point>=TERM" or "=INT" sends that signal instead
// (a scheduler's preemption, a Ctrl-C), "=STOP" freezes the process (a rank that stops
// answering), and several points may be listed, separated by commas;
// each fires the first time it is reached. "<point>@R" fires only in rank R of a multi-process
// run (the RANK variable; a single process is rank 0).
// Without the variable this costs one check of an empty list.
#pragma once

#include <cstdint>

namespace ctune {

void kill_point(const char* what, std::int64_t step, const char* where);

}  // namespace ctune
