#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace ctune {

void init_logging(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    throw ConfigError("--log-level: expected trace|debug|info|warn|error|off, found \"" + level + "\"");
  }
  auto logger = spdlog::stderr_color_mt("ctune");
  logger->set_pattern("[%H:%M:%S.%e] %^%l%$ %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace ctune
