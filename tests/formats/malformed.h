// Malformed checkpoint directories for the refusal tests: each case is a model directory with
// a valid tiny config.json and one defect (in a safetensors file, the index or config.json),
// built byte by byte here rather than by ctune's writer.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ctune::testing {

enum class Expect { Format, Io, Config, Unsupported };

struct MalformedCase {
  std::string name;
  std::filesystem::path dir;
  Expect kind;
  std::string message_part;  // must appear in the one-line error
  std::string file_part;     // the file the message must name
};

// Writes every case under `root` (replacing what was there) and returns them.
std::vector<MalformedCase> write_malformed_cases(const std::filesystem::path& root);

// A valid safetensors file image: F32 tensors "a" [2,3] and "b" [4], header padded to 8.
std::string valid_safetensors_bytes();

// The valid config.json of the safetensors/index cases (they fail before tensors are matched
// against the model, so it only has to parse).
std::string tiny_config_json();

}  // namespace ctune::testing
