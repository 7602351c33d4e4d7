#include "core/regular_file.h"

#include "core/error.h"

namespace ctune {
namespace fs = std::filesystem;

void require_regular_file(const fs::path& path, const std::string& what) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) return;  // the caller's open reports it, in its own words
  if (fs::is_directory(status)) throw IoError(path.string() + ": is a directory, expected " + what);
  if (!fs::is_regular_file(status)) {
    throw IoError(path.string() + ": is not a regular file (a FIFO, socket or device cannot be read to an end; expected " + what + ")");
  }
}

}  // namespace ctune
