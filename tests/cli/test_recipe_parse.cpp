// Recipe parsing alone, without LibTorch, so that the sanitizer stage of scripts/test.sh runs it:
// every shipped recipe parses, and the keys whose values are mappings (data.template_kwargs,
// reward.*) keep each scalar's YAML type. The fuzz target (scripts/fuzz.sh recipe) found that
// reading a mapping's values kept a reference into yaml-cpp's temporary iterator proxy
// (AddressSanitizer: stack-use-after-scope on every GRPO recipe); test_recipes runs the binary.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/recipe.h"

namespace fs = std::filesystem;

namespace {

TEST(RecipeParse, ShippedRecipesParse) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(CTUNE_SOURCE_DIR) / "recipes")) {
    if (e.path().extension() != ".yaml") continue;
    const auto recipe = ctune::Recipe::load(e.path());
    EXPECT_FALSE(recipe.to_yaml().empty()) << e.path();
    ++n;
  }
  EXPECT_GE(n, 6u);
}

TEST(RecipeParse, MappingValuesKeepTheirTypes) {
  const auto r = ctune::Recipe::parse(
      "output_dir: runs/x\nmodel: {path: m}\ndata:\n  train: t.jsonl\n"
      "  template_kwargs: {enable_thinking: false, quoted: \"false\", n: 3, x: 2.5, name: qwen, none: null}\n"
      "reward:\n  exact: {field: answer, weight: 1.5}\n",
      "inline.yaml");
  const auto kwargs = r.get_map("data.template_kwargs");
  EXPECT_EQ(kwargs.dump(), R"({"enable_thinking":false,"quoted":"false","n":3,"x":2.5,"name":"qwen","none":null})");
  EXPECT_EQ(r.get_map("reward.exact").dump(), R"({"field":"answer","weight":1.5})");
  try {
    ctune::Recipe::parse("output_dir: r\nmodel: {path: m}\ndata: {train: t, template_kwargs: {a: [1]}}\n", "bad.yaml");
    ADD_FAILURE() << "a nested value was accepted";
  } catch (const ctune::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("\"a\" is not a string, number or boolean"), std::string::npos) << e.what();
  }
}

// A recipe is UTF-8 text: other bytes in a mapping's value reached the JSON writer, which threw
// its own unlocated error (found by fuzzing); now the file and line are named, for overrides too.
TEST(RecipeParse, InvalidUtf8IsRefusedWithItsLine) {
  for (const std::string bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    try {
      ctune::Recipe::parse("output_dir: r\nmodel: {path: m}\ndata: {train: t, template_kwargs: {a: x" + bad + "}}\n", "bad.yaml");
      ADD_FAILURE() << "invalid UTF-8 accepted";
    } catch (const ctune::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.yaml:3: invalid UTF-8 (byte 0x"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(ctune::Recipe::parse("output_dir: r\nmodel: {path: m}\ndata: {train: t}\n", "ok.yaml", {"data.template_kwargs={a: \xff}"}),
               ctune::ConfigError);
  // Valid multi-byte text is kept as written.
  const auto r = ctune::Recipe::parse("output_dir: r\nmodel: {path: m}\ndata: {train: t, template_kwargs: {a: \"é😀\"}}\n", "ok.yaml");
  EXPECT_EQ(r.get_map("data.template_kwargs")["a"].get<std::string>(), "é😀");
}

// YAML allows a mapping or a list as a key; a recipe's keys are names (found by fuzzing: yaml-cpp's
// own conversion error escaped unlocated).
TEST(RecipeParse, KeysThatAreNotNamesAreRefused) {
  for (const std::string text : {"? [a, b]\n: 1\n", "model:\n  ? {x: 1}\n  : 2\n", "? \n: 3\n"}) {
    try {
      ctune::Recipe::parse(text, "keys.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ctune::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("keys.yaml:", 0), 0u) << e.what();
    }
  }
}

}  // namespace
