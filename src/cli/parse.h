// Small command-line value parsers shared by subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctune::cli {

// "1,2, 3" -> {1, 2, 3}. Throws ConfigError naming `where` and the bad item.
std::vector<std::int64_t> parse_id_list(const std::string& text, const std::string& where);

}  // namespace ctune::cli
