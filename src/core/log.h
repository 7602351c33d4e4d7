// Logging: spdlog to stderr, so stdout stays clean for machine-readable output (--json).
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace ctune {

// Sets up the process-wide stderr logger; `level` is trace|debug|info|warn|error|off.
void init_logging(const std::string& level);

}  // namespace ctune
