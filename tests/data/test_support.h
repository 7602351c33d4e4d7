// Shared helpers of the data tests: where fixture data lives (paths baked in by CMake), the
// real tokenizers from the npm cache and a byte-level tokenizer written once per run, and the
// trained runs of an example. Readable strings/ids in failure messages and file writing come
// from the tokenizer tests' helpers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/conversation.h"
#include "data/example.h"
#include "tokenizer/tokenizer.h"
#include "../tokenizer/test_support.h"

namespace ctune::data::test {

std::filesystem::path source_dir();  // tests/data
std::filesystem::path data_dir();    // build-tree directory of generated references
// A fresh empty directory under data_dir()/scratch.
std::filesystem::path scratch_dir(const std::string& name);

// tokenizer.json directory of "llama3", "qwen3" or "llama2" in the npm cache.
std::filesystem::path real_tokenizer_dir(const std::string& name);
// Loaded once per process. Fails the test (returns nullptr) when the fixture has not run.
const tok::Tokenizer* real_tokenizer(const std::string& name);

// A byte-level tokenizer (tok::write_byte_tokenizer: <s> = 256, </s> = 257, add_bos) in its
// own directory, written once per process.
std::filesystem::path byte_tokenizer_dir();
const tok::Tokenizer& byte_tokenizer();

// Reads a JSON file from the build tree; fails the test with a hint when the fixture has not run.
Json load_reference(const std::filesystem::path& path);

struct NamedConversation {
  std::string id;
  Conversation messages;
};
// tests/data/conversations.jsonl
std::vector<NamedConversation> load_conversations();

using tok::test::show;        // a string quoted and escaped for messages
using tok::test::show_ids;    // an id list, shortened
using tok::test::write_text;  // writes a file, creating parent directories

// The maximal runs of trained tokens of `ex` (labels != -100), each as its ids.
std::vector<std::vector<std::int32_t>> trained_runs(const Example& ex);

}  // namespace ctune::data::test
