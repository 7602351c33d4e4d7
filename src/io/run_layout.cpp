#include "io/run_layout.h"

#include <cstdio>
#include <cstdlib>

namespace ctune::io {
namespace fs = std::filesystem;

fs::path checkpoint_dir(const fs::path& output_dir, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return output_dir / kCheckpointsDir / name;
}

std::int64_t checkpoint_step(const fs::path& dir) {
  const std::string name = dir.filename().string();
  // At least the eight digits step_%08lld writes, at most what an int64 holds.
  if (name.size() < 5 + 8 || name.size() > 5 + 18 || name.compare(0, 5, "step_") != 0) return -1;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  return std::strtoll(name.c_str() + 5, nullptr, 10);
}

fs::path result_dir(const fs::path& output_dir, MethodKind method) { return output_dir / method_names(method).result_dir; }

std::vector<std::string> run_outputs() {
  std::vector<std::string> out = {kMetricsFile, kEventsDir, kTrainLog, kRecipeFile, kProfileTrace, kReferenceLogps, kSamplesFile};
  for (const auto& m : method_table()) out.push_back(m.result_dir);
  out.push_back(kCheckpointsDir);
  return out;
}

}  // namespace ctune::io
