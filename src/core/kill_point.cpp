#include "core/kill_point.h"

#include <csignal>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace ctune {

namespace {

// CTUNE_KILL_AT as (point, signal) pairs: "a:1:b,c:2:d=TERM" -> {("a:1:b", SIGKILL), ("c:2:d", SIGTERM)}.
std::vector<std::pair<std::string, int>> parse_targets(const char* text) {
  std::vector<std::pair<std::string, int>> out;
  std::string all = text ? text : "";
  for (std::size_t start = 0; start < all.size();) {
    std::size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    std::string item = all.substr(start, end - start);
    int signal = SIGKILL;
    if (const auto eq = item.find('='); eq != std::string::npos) {
      const std::string name = item.substr(eq + 1);
      signal = name == "TERM" ? SIGTERM : name == "INT" ? SIGINT : name == "STOP" ? SIGSTOP : SIGKILL;
      item.resize(eq);
    }
    if (const auto at = item.find('@'); at != std::string::npos) {
      const char* rank = std::getenv("RANK");
      if (item.substr(at + 1) != (rank ? rank : "0")) item.clear();  // another rank's point
      item.resize(std::min(at, item.size()));
    }
    if (!item.empty()) out.emplace_back(item, signal);
    start = end + 1;
  }
  return out;
}

}  // namespace

void kill_point(const char* what, std::int64_t step, const char* where) {
  static auto targets = parse_targets(std::getenv("CTUNE_KILL_AT"));
  if (targets.empty()) return;
  const std::string here = std::string(what) + ":" + std::to_string(step) + ":" + where;
  for (auto& [point, signal] : targets) {
    if (point != here) continue;
    point.clear();  // each point fires once (a step passes "mid" once per micro-batch)
    std::raise(signal);
  }
}

}  // namespace ctune
