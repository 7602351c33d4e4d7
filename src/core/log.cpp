#include "core/log.h"

#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"
#include "core/progress.h"

namespace ctune {
namespace {

// stderr's log lines go above the live progress line (core/progress.h), never into it.
class AboveProgressSink : public spdlog::sinks::sink {
 public:
  AboveProgressSink() : inner_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {}
  void log(const spdlog::details::log_msg& msg) override { print_above([&] { inner_->log(msg); }); }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override { inner_->set_formatter(std::move(formatter)); }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

}  // namespace

void init_logging(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    throw ConfigError("--log-level: expected trace|debug|info|warn|error|off, found \"" + level + "\"");
  }
  auto logger = std::make_shared<spdlog::logger>("ctune", std::make_shared<AboveProgressSink>());
  logger->set_pattern("[%H:%M:%S.%e] %^%l%$ %v");
  logger->set_level(lvl);
  spdlog::register_logger(logger);
  spdlog::set_default_logger(logger);
  check_progress_settings();
}

}  // namespace ctune
