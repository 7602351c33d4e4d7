#include "io/manifest.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "core/json.h"
#include "io/file.h"

namespace ctune::io {
namespace fs = std::filesystem;

std::uint64_t file_checksum(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open for reading");
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(), XXH64_freeState);
  XXH64_reset(state.get(), 0);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) XXH64_update(state.get(), buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw IoError(path.string() + ": read failed");
  return XXH64_digest(state.get());
}

namespace {
std::string hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

std::vector<ManifestEntry> write_manifest(const fs::path& dir) {
  std::vector<ManifestEntry> entries;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == kManifestName) continue;
    entries.push_back({fs::relative(e.path(), dir).generic_string(), static_cast<std::uint64_t>(e.file_size()),
                       file_checksum(e.path())});
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  Json files = Json::array();
  for (const auto& m : entries) files.push_back({{"file", m.file}, {"size", m.size}, {"xxh64", hex(m.xxh64)}});
  write_file_atomic(dir / kManifestName, Json({{"format", "ctune-manifest-1"}, {"files", files}}).dump(1) + "\n");
  return entries;
}

std::string verify_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestName;
  std::error_code ec;
  if (!fs::exists(path, ec)) return "no " + std::string(kManifestName) + " (incomplete: the write did not finish)";
  Json j;
  try {
    j = read_json_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array()) return path.string() + ": not a manifest";
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("file") || !f.contains("size") || !f.contains("xxh64")) {
      return path.string() + ": malformed entry " + f.dump();
    }
    const fs::path file = dir / f["file"].get<std::string>();
    if (!fs::exists(file, ec)) return file.string() + ": listed in the manifest but missing";
    const auto size = static_cast<std::uint64_t>(fs::file_size(file, ec));
    if (size != f["size"].get<std::uint64_t>()) {
      return file.string() + ": " + std::to_string(size) + " bytes, the manifest says " + std::to_string(f["size"].get<std::uint64_t>());
    }
    if (hex(file_checksum(file)) != f["xxh64"].get<std::string>()) return file.string() + ": checksum mismatch (corrupted)";
  }
  return "";
}

}  // namespace ctune::io
