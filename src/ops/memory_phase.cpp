#include "ops/memory_phase.h"

#include <atomic>
#include <exception>
#include <mutex>

namespace ctune::ops {

namespace {
std::atomic<const char*> g_phase{nullptr};
std::atomic<std::int64_t> g_step{0};
std::atomic<std::int64_t> g_layer{-1};
std::mutex g_refused_mutex;
std::optional<RefusedAllocation> g_refused;
}  // namespace

MemoryPhase::MemoryPhase(const char* what) : previous_(g_phase.exchange(what)), exceptions_(std::uncaught_exceptions()) {}
MemoryPhase::~MemoryPhase() {
  if (std::uncaught_exceptions() == exceptions_) g_phase.store(previous_);
}

void set_memory_phase_step(std::int64_t step) { g_step.store(step); }
void set_memory_phase_layer(std::int64_t layer) { g_layer.store(layer); }

bool memory_phase_known() { return g_phase.load() != nullptr || g_step.load() > 0; }

std::string memory_phase_text() {
  const char* phase = g_phase.load();
  const std::int64_t step = g_step.load(), layer = g_layer.load();
  std::string text = step > 0 ? "step " + std::to_string(step) : "";
  if (phase) {
    text += (text.empty() ? "" : ", ") + std::string(phase);
    // Only a forward knows its layer: backward runs the autograd graph, not the decoder's loop.
    if (std::string(phase) == "forward") {
      text += layer >= 0 ? " of layer " + std::to_string(layer) : layer == kPhaseHead ? " of the head and loss" : " of the embedding";
    }
  }
  return text.empty() ? "before training" : text;
}

void note_refused_allocation(const RefusedAllocation& refused) {
  std::lock_guard<std::mutex> lock(g_refused_mutex);
  g_refused = refused;
}

std::optional<RefusedAllocation> last_refused_allocation() {
  std::lock_guard<std::mutex> lock(g_refused_mutex);
  return g_refused;
}

}  // namespace ctune::ops
