#include "cli/parse.h"

#include <cctype>
#include <filesystem>

#include "core/error.h"

namespace ctune::cli {

std::vector<std::int64_t> parse_id_list(const std::string& text, const std::string& where) {
  std::vector<std::int64_t> ids;
  std::size_t start = 0;
  for (std::size_t item = 1;; ++item) {
    auto comma = text.find(',', start);
    std::string token = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front()))) token.erase(0, 1);
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (token.empty() || used != token.size()) {
      throw ConfigError(where + ": expected comma-separated integer ids, found \"" + token + "\" at item " +
                        std::to_string(item));
    }
    ids.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

bool is_override_in_path_slot(const std::string& word) {
  std::error_code ec;
  return word.find('=') != std::string::npos && !std::filesystem::exists(word, ec);
}

}  // namespace ctune::cli
