// Tokenizer test helpers; see test_support.h.
#include "test_support.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/utf8.h"
#include "scratch.h"
#include "tokenizer/unicode.h"

namespace ctune::tok::test {

std::filesystem::path corpus_path() {
  return CTUNE_TOKENIZER_CORPUS;
}
std::filesystem::path npm_cache() {
  return CTUNE_TOKENIZER_NPM_CACHE;
}
std::filesystem::path data_dir() {
  return CTUNE_TOKENIZER_TEST_DATA;
}

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = ctune::test::process_scratch_root(data_dir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<std::string> load_corpus() {
  std::ifstream in(corpus_path());
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(parse_json(line, corpus_path().string()).get<std::string>());
  }
  return out;
}

Json load_reference(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: the fixture tests (tokenizer_fetch, tokenizer_reference_*) "
                  << "have not run. Run the suite through ctest, e.g. ctest -R tokenizer";
    return Json();
  }
  return read_json_file(path);
}

std::vector<std::int32_t> to_ids(const Json& array) {
  std::vector<std::int32_t> ids;
  for (const Json& v : array) ids.push_back(v.get<std::int32_t>());
  return ids;
}

std::string show(const std::string& s, std::size_t limit) {
  std::string out = "\"";
  std::size_t i = 0, chars = 0;
  std::string repaired = repair_utf8(s);
  while (i < repaired.size()) {
    if (++chars > limit) {
      out += "...";
      break;
    }
    std::uint32_t cp = next_code_point(repaired, i);
    char buf[16];
    if (cp == '\n')
      out += "\\n";
    else if (cp == '\r')
      out += "\\r";
    else if (cp == '\t')
      out += "\\t";
    else if (cp == '"' || cp == '\\')
      out += std::string("\\") + static_cast<char>(cp);
    else if (cp >= 0x20 && cp < 0x7F)
      out.push_back(static_cast<char>(cp));
    else {
      std::snprintf(buf, sizeof buf, cp > 0xFFFF ? "\\U%08X" : "\\u%04X", cp);
      out += buf;
    }
  }
  return out + "\"";
}

std::string show_ids(const std::vector<std::int32_t>& ids, std::size_t limit) {
  std::ostringstream os;
  os << "[";
  for (std::size_t k = 0; k < ids.size() && k < limit; ++k) os << (k ? ", " : "") << ids[k];
  if (ids.size() > limit) os << ", ... (" << ids.size() << " ids)";
  os << "]";
  return os.str();
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace ctune::tok::test
