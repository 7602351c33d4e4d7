// Where a command reads a file (a recipe, a dataset, a config, a tokenizer, a prompt file), it
// reads a regular file: a FIFO would block, and /dev/zero or a character device would never end,
// so no size cap could apply. The check follows symbolic links (a link to a regular file is
// fine) and comes before any read.
#pragma once

#include <filesystem>
#include <string>

namespace ctune {

// Throws IoError naming `path` and `what` it should be ("a dataset file") when it is a
// directory or not a regular file. A path that does not exist passes: the caller's own open
// fails on it with its usual message.
void require_regular_file(const std::filesystem::path& path, const std::string& what);

}  // namespace ctune
