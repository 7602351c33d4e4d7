// libFuzzer target: any bytes as a YAML recipe (and, after a "\n\x01\n" separator, one
// key=value override per line), parsed and checked against the recipe schema as `ctune train` and
// `ctune validate` read one. Checks: a ctune error (ConfigError and its kin) is the only way out:
// never a crash, a sanitizer report, a hang or yaml-cpp's own exception; and a
// recipe that parses answers every schema key through its typed getter and prints.
// Run with scripts/fuzz.sh recipe (docs/testing.md#fuzzing).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/recipe.h"
#include "core/recipe_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto cut = input.find("\n\x01\n");
  std::vector<std::string> overrides;
  if (cut != std::string_view::npos) {
    std::string_view rest = input.substr(cut + 3);
    while (!rest.empty()) {
      const auto eol = rest.find('\n');
      overrides.emplace_back(rest.substr(0, eol));
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    }
  }
  std::optional<ctune::Recipe> recipe;
  try {
    recipe = ctune::Recipe::parse(std::string(input.substr(0, cut)), "fuzz.yaml", overrides);
  } catch (const ctune::Error&) {
    return 0;
  }
  // A parsed recipe answers every key as its schema type says, and prints.
  using ctune::KeyType;
  for (const auto& spec : ctune::recipe_schema()) {
    const std::string& k = spec.key;
    if (recipe->is_null(k) || recipe->is_auto(k)) continue;
    switch (spec.type) {
      case KeyType::String:
      case KeyType::Path: (void)recipe->get_string(k); break;
      case KeyType::Int: (void)recipe->get_int(k); break;
      case KeyType::Float: (void)recipe->get_float(k); break;
      case KeyType::Bool: (void)recipe->get_bool(k); break;
      case KeyType::StringList: (void)recipe->get_strings(k); break;
      case KeyType::FloatList: (void)recipe->get_floats(k); break;
      case KeyType::Map: (void)recipe->get_map(k); break;
    }
  }
  (void)recipe->to_yaml();
  return 0;
}
