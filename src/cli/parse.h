// Small command-line value parsers shared by subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctune::cli {

// "1,2, 3" -> {1, 2, 3}. Throws ConfigError naming `where` and the bad item.
std::vector<std::int64_t> parse_id_list(const std::string& text, const std::string& where);

// Whether a word CLI11 put in a path's slot (the recipe of `eval`, the checkpoint of `--resume`)
// is a key=value override the user meant instead: it holds '=' and names no file.
bool is_override_in_path_slot(const std::string& word);

}  // namespace ctune::cli
