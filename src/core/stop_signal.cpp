#include "core/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace ctune {

namespace {

std::atomic<int> g_requested{0};
std::atomic<pid_t> g_groups[16];  // 0: a free slot

extern "C" void on_stop_signal(int signal) {
  int expected = 0;
  // The first signal is a request; a second one (either kind) means now. Only async-signal-safe
  // calls here: atomics, kill and _exit.
  if (g_requested.compare_exchange_strong(expected, signal)) return;
  for (auto& group : g_groups)
    if (const pid_t g = group.load(); g > 0) ::kill(-g, SIGKILL);
  ::_exit(128 + signal);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted reads and writes resume; the loop polls the flag
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int stop_requested() { return g_requested.load(); }

void end_with_process(pid_t group) {
  for (auto& slot : g_groups) {
    pid_t free = 0;
    if (slot.compare_exchange_strong(free, group)) return;
  }
}

void forget_process_group(pid_t group) {
  for (auto& slot : g_groups) {
    pid_t mine = group;
    if (slot.compare_exchange_strong(mine, 0)) return;
  }
}

std::string signal_name(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
  return "signal " + std::to_string(signal);
}

}  // namespace ctune
