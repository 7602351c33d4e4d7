#include "core/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace ctune {

namespace {

std::atomic<int> g_requested{0};

extern "C" void on_stop_signal(int signal) {
  int expected = 0;
  // The first signal is a request; a second one (either kind) means now. Only async-signal-safe
  // calls here: an atomic exchange and _exit.
  if (!g_requested.compare_exchange_strong(expected, signal)) ::_exit(128 + signal);
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

std::string signal_name(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
  return "signal " + std::to_string(signal);
}

}  // namespace ctune
