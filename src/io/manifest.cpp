#include "io/manifest.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>

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

namespace {

// Adds up to `n` bytes of `in` from `offset` to the hash.
void hash_range(XXH64_state_t* state, std::ifstream& in, std::uint64_t offset, std::uint64_t n, std::vector<char>& buffer) {
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  while (n > 0 && in) {
    const auto chunk = static_cast<std::streamsize>(std::min<std::uint64_t>(n, buffer.size()));
    in.read(buffer.data(), chunk);
    if (in.gcount() <= 0) break;
    XXH64_update(state, buffer.data(), static_cast<std::size_t>(in.gcount()));
    n -= static_cast<std::uint64_t>(in.gcount());
  }
}

void hash_file_into(XXH64_state_t* state, const fs::path& path, bool sampled_safetensors) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open for reading");
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  XXH64_update(state, &size, sizeof(size));
  std::vector<char> buffer(1 << 16);
  if (!sampled_safetensors || size < (1u << 22)) {
    hash_range(state, in, 0, size, buffer);
  } else {
    std::uint64_t header = 0;
    in.read(reinterpret_cast<char*>(&header), 8);
    hash_range(state, in, 0, std::min<std::uint64_t>(size, 8 + header), buffer);
    const std::uint64_t start = std::min<std::uint64_t>(size, 8 + header), span = size - start;
    constexpr std::uint64_t kSamples = 16, kSample = 1 << 16;
    for (std::uint64_t i = 0; i < kSamples && span > kSample; ++i) hash_range(state, in, start + (span - kSample) * i / (kSamples - 1), kSample, buffer);
  }
  if (in.bad()) throw IoError(path.string() + ": read failed");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string input_fingerprint(const fs::path& path) {
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(), XXH64_freeState);
  XXH64_reset(state.get(), 0);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    hash_file_into(state.get(), path, false);
    return hex(XXH64_digest(state.get()));
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (ends_with(name, ".json") || ends_with(name, ".safetensors") || name == "tokenizer.model")) {
      files.push_back(e.path());
    }
  }
  if (ec) throw IoError(path.string() + ": cannot list (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string name = f.filename().string();
    XXH64_update(state.get(), name.data(), name.size());
    hash_file_into(state.get(), f, ends_with(name, ".safetensors"));
  }
  return hex(XXH64_digest(state.get()));
}

ManifestEntry manifest_entry(const fs::path& dir, const std::string& file) {
  const fs::path path = dir / file;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw IoError(path.string() + ": cannot read its size (" + ec.message() + ")");
  return {file, static_cast<std::uint64_t>(size), file_checksum(path)};
}

Json entry_to_json(const ManifestEntry& entry) { return {{"file", entry.file}, {"size", entry.size}, {"xxh64", hex(entry.xxh64)}}; }

std::optional<ManifestEntry> entry_from_json(const Json& j) {
  const bool typed = j.is_object() && j.contains("file") && j["file"].is_string() && j.contains("size") &&
                     j["size"].is_number_unsigned() && j.contains("xxh64") && j["xxh64"].is_string();
  if (!typed) return std::nullopt;
  const std::string digits = j["xxh64"].get<std::string>();
  if (digits.size() != 16 || digits.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
  return ManifestEntry{j["file"].get<std::string>(), j["size"].get<std::uint64_t>(), std::stoull(digits, nullptr, 16)};
}

std::string verify_entry(const fs::path& dir, const ManifestEntry& entry) {
  const fs::path file = dir / entry.file;
  std::error_code ec;
  if (!fs::exists(file, ec)) return file.string() + ": listed in the manifest but missing";
  const auto size = static_cast<std::uint64_t>(fs::file_size(file, ec));
  if (size != entry.size) return file.string() + ": " + std::to_string(size) + " bytes, the manifest says " + std::to_string(entry.size);
  if (file_checksum(file) != entry.xxh64) return file.string() + ": checksum mismatch (corrupted)";
  return "";
}

std::vector<ManifestEntry> write_manifest(const fs::path& dir) {
  std::vector<ManifestEntry> entries;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == kManifestName) continue;
    entries.push_back(manifest_entry(dir, fs::relative(e.path(), dir).generic_string()));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  Json files = Json::array();
  for (const auto& m : entries) files.push_back(entry_to_json(m));
  write_file_atomic(dir / kManifestName, Json({{"format", "ctune-manifest-1"}, {"files", files}}).dump(1) + "\n");
  return entries;
}

std::string verify_manifest(const fs::path& dir, const std::vector<std::string>& required) {
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
  if (j["files"].empty()) return path.string() + ": lists no files (an empty manifest proves nothing)";
  std::set<std::string> listed;
  for (const auto& f : j["files"]) {
    auto entry = entry_from_json(f);
    if (!entry) {
      return path.string() + ": malformed entry " + f.dump().substr(0, 120) + " (expected " + kManifestEntryShape + ")";
    }
    const fs::path relative = fs::path(entry->file).lexically_normal();
    if (relative.empty() || relative.is_absolute() || *relative.begin() == "..") {
      return path.string() + ": entry \"" + entry->file + "\" is outside the checkpoint directory";
    }
    listed.insert(relative.generic_string());
    entry->file = relative.generic_string();
    if (std::string problem = verify_entry(dir, *entry); !problem.empty()) return problem;
  }
  for (const auto& name : required) {
    if (!listed.count(name)) return path.string() + ": does not list " + name + " (not a complete checkpoint)";
  }
  return "";
}

}  // namespace ctune::io
