// Checkpoint manifests: MANIFEST.json lists every file of a directory with its size and XXH64
// checksum and is written last, so a directory whose manifest verifies is complete and intact,
// and anything else (killed mid-write, truncated, bit-flipped) is detected before use.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace ctune::io {

inline constexpr const char* kManifestName = "MANIFEST.json";

struct ManifestEntry {
  std::string file;  // relative to the directory
  std::uint64_t size = 0;
  std::uint64_t xxh64 = 0;
};

// XXH64 (seed 0) of a file's bytes, streamed.
std::uint64_t file_checksum(const std::filesystem::path& path);

// dir/file's entry now: its size and checksum.
ManifestEntry manifest_entry(const std::filesystem::path& dir, const std::string& file);

// An entry as a manifest lists it; and back, nullopt when `json` is not one.
inline constexpr const char* kManifestEntryShape = "{\"file\": string, \"size\": unsigned integer, \"xxh64\": 16 hex digits}";
Json entry_to_json(const ManifestEntry& entry);
std::optional<ManifestEntry> entry_from_json(const Json& json);

// "" when dir/entry.file has the entry's size and checksum; otherwise what differs, naming the
// file. A file kept beside a checkpoint (objective.precompute_reference's table, whose entry the
// checkpoint records) is verified as the checkpoint's own files are.
std::string verify_entry(const std::filesystem::path& dir, const ManifestEntry& entry);

// Hashes every regular file under `dir` (recursively, manifest excluded) and writes
// dir/MANIFEST.json atomically. Returns the entries.
std::vector<ManifestEntry> write_manifest(const std::filesystem::path& dir);

// "" when dir/MANIFEST.json exists, parses, lists at least one file and every file in
// `required`, and every listed file (inside `dir`) has its size and checksum; otherwise what is
// wrong, naming the file.
std::string verify_manifest(const std::filesystem::path& dir, const std::vector<std::string>& required = {});

// A fingerprint (16 hex digits) of an input a run depends on, cheap enough to take at every
// start: a file's XXH64 (a dataset: all of it); a directory's, over its JSON files, any
// tokenizer.model, and each *.safetensors file's header plus 16 samples of 64 KiB spread over its
// data, so that another model of the same shape differs too, without reading every weight.
// IoError when `path` cannot be read.
std::string input_fingerprint(const std::filesystem::path& path);

}  // namespace ctune::io
