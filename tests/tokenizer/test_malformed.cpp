// Malformed inputs must raise the typed error that names the problem, never crash: missing files,
// truncated and mutated JSON, wrong types, merges with unknown tokens, unsupported component
// types, bad side files, garbage SentencePiece models, out-of-range ids.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::tok::test {
namespace {

Json small_tokenizer() {
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 5}, {"content", "<s>"}, {"special", true}}}},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"vocab",
             {{"a", 0},
              {"b", 1},
              {"ab", 2},
              {"\xC4\xA0", 3},
              {"\xC4\xA0"
               "ab",
               4}}},
            {"merges", {"a b", "\xC4\xA0 ab"}}}}};
}

// Writes `root` (or raw text) as dir/tokenizer.json and loads the directory.
std::unique_ptr<Tokenizer> load_text(const std::string& name, const std::string& text) {
  auto dir = scratch_dir(name);
  write_text(dir / "tokenizer.json", text);
  return load_tokenizer(dir);
}
std::unique_ptr<Tokenizer> load_json(const std::string& name, const Json& root) {
  return load_text(name, root.dump());
}

template <typename E>
void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning: " << fragment;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST(Malformed, SmallTokenizerLoads) {
  auto tok = load_json("ok", small_tokenizer());
  EXPECT_EQ(tok->encode(" ab<s>", false), (std::vector<std::int32_t>{4, 5}));
}

TEST(Malformed, MissingFiles) {
  expect_error<IoError>([] { load_tokenizer(data_dir() / "no-such-dir"); }, "no such file");
  auto empty = scratch_dir("empty");
  expect_error<IoError>([&] { load_tokenizer(empty); }, "no tokenizer.json or tokenizer.model");
}

TEST(Malformed, EveryTruncationIsAFormatError) {
  const std::string text = small_tokenizer().dump();
  auto dir = scratch_dir("truncated");
  for (std::size_t n = 0; n < text.size(); ++n) {
    write_text(dir / "tokenizer.json", text.substr(0, n));
    EXPECT_THROW(load_tokenizer(dir / "tokenizer.json"), FormatError) << "prefix of " << n << " bytes";
  }
}

TEST(Malformed, MutatedFilesNeverCrash) {
  // Deterministic byte mutations of a valid file: each load either succeeds or throws a ctune
  // error; anything else (a crash, a std:: exception) fails the test.
  const std::string text = small_tokenizer().dump();
  auto dir = scratch_dir("mutated");
  const char replacements[] = {'"', '{', '}', '[', ']', ',', ':', '0', '-', 'x', '\\', ' ', '\xC4', '\0'};
  std::size_t loaded = 0, rejected = 0;
  for (std::size_t pos = 0; pos < text.size(); ++pos) {
    for (char r : replacements) {
      std::string m = text;
      m[pos] = r;
      write_text(dir / "tokenizer.json", m);
      try {
        auto tok = load_tokenizer(dir / "tokenizer.json");
        tok->decode(tok->encode("ab <s> \xC4\xA0", true));
        ++loaded;
      } catch (const ctune::Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(loaded, 0u);
}

// Nested a million deep (in a component, in added_tokens, at the top): refused before parsing,
// never a stack overflow.
TEST(Malformed, DeepNestingIsRefused) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  expect_error<FormatError>([&] { load_text("n1", "{\"normalizer\": " + deep + "}"); }, "nested deeper than 128 levels");
  expect_error<FormatError>([&] { load_text("n2", "{\"added_tokens\": " + deep + "}"); }, "nested deeper than");
  expect_error<FormatError>([&] { load_text("n3", deep); }, "nested deeper than");
  // Brackets inside strings are text, not nesting.
  expect_error<FormatError>([&] { load_text("n4", "{\"x\": \"" + std::string(1000, '[') + "\", \"model\": 3}"); }, "model");
}

TEST(Malformed, WrongTypes) {
  Json root = small_tokenizer();
  root["model"]["vocab"]["a"] = "zero";
  expect_error<FormatError>([&] { load_json("t1", root); },
                            "model.vocab: token \"a\" expected an integer id");
  root = small_tokenizer();
  root["model"]["vocab"]["a"] = -3;
  expect_error<FormatError>([&] { load_json("t2", root); }, "has id -3");
  root = small_tokenizer();
  root["model"]["merges"] = "a b";
  expect_error<FormatError>([&] { load_json("t3", root); }, "merges");
  root = small_tokenizer();
  root["model"]["merges"] = {{"a", "b", "c"}};
  expect_error<FormatError>([&] { load_json("t4", root); }, "model.merges[0]: expected a string or a pair");
  root = small_tokenizer();
  root["added_tokens"] = {{{"content", "<s>"}}};
  expect_error<FormatError>([&] { load_json("t5", root); }, "added_tokens[0]");
  root = small_tokenizer();
  root["normalizer"] = "NFC";
  expect_error<FormatError>([&] { load_json("t6", root); }, "normalizer: expected an object");
  root = small_tokenizer();
  root["pre_tokenizer"]["add_prefix_space"] = "yes";
  expect_error<FormatError>([&] { load_json("t7", root); }, "add_prefix_space");
  expect_error<FormatError>([&] { load_text("t8", "[1, 2, 3]"); }, "expected a JSON object");
  expect_error<FormatError>([&] { load_text("t9", "{\"model\": 3}"); }, "model");
}

TEST(Malformed, MergesWithUnknownTokens) {
  Json root = small_tokenizer();
  root["model"]["merges"] = {"a b", "b zz"};
  expect_error<FormatError>([&] { load_json("m1", root); },
                            "model.merges[1]: token \"zz\" is not in the vocabulary");
  root["model"]["merges"] = {"b a"};  // "ba" is not in the vocabulary either
  expect_error<FormatError>([&] { load_json("m2", root); }, "token \"ba\" is not in the vocabulary");
  root["model"]["merges"] = {"ab"};
  expect_error<FormatError>([&] { load_json("m3", root); }, "expected \"left right\"");
}

TEST(Malformed, UnsupportedComponents) {
  Json root = small_tokenizer();
  root["pre_tokenizer"] = {{"type", "Whitespace2"}};
  expect_error<UnsupportedError>(
      [&] { load_json("u1", root); },
      "pre_tokenizer.type \"Whitespace2\" is not supported (supported: Sequence, Split, "
      "ByteLevel, Metaspace");
  root = small_tokenizer();
  root["model"]["type"] = "Unigram";
  expect_error<UnsupportedError>([&] { load_json("u2", root); }, "model.type \"Unigram\" is not supported");
  root = small_tokenizer();
  root["decoder"] = {{"type", "WordPiece"}};
  expect_error<UnsupportedError>([&] { load_json("u3", root); }, "decoder.type \"WordPiece\"");
  root = small_tokenizer();
  root["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  expect_error<UnsupportedError>([&] { load_json("u4", root); }, "normalizer.type \"Precompiled\"");
  root = small_tokenizer();
  root["model"]["dropout"] = 0.1;
  expect_error<UnsupportedError>([&] { load_json("u5", root); }, "dropout");
}

TEST(Malformed, DecodeOutOfRange) {
  auto tok = load_json("range", small_tokenizer());
  EXPECT_EQ(tok->vocab_size(), 6u);
  expect_error<FormatError>([&] { tok->decode({0, 6}); }, "id 6 is not in the vocabulary (size 6)");
  expect_error<FormatError>([&] { tok->decode({-1}); }, "id -1");
  expect_error<FormatError>([&] { tok->id_to_token(99); }, "id 99");
  EXPECT_EQ(tok->decode({}), "");
}

TEST(Malformed, SideFiles) {
  auto dir = scratch_dir("side");
  write_text(dir / "tokenizer.json", small_tokenizer().dump());
  write_text(dir / "tokenizer_config.json", R"({"bos_token": "<nope>"})");
  expect_error<FormatError>([&] { load_tokenizer(dir); },
                            "tokenizer_config.json: bos_token \"<nope>\" is not in the vocabulary");
  write_text(dir / "tokenizer_config.json", R"({"bos_token": 5})");
  expect_error<FormatError>([&] { load_tokenizer(dir); },
                            "key \"bos_token\" expected a string or {\"content\": ...}");
  write_text(dir / "tokenizer_config.json", R"({"add_bos_token": true})");
  expect_error<FormatError>([&] { load_tokenizer(dir); }, "add_bos_token is true but no bos_token is set");
  write_text(dir / "tokenizer_config.json", R"({"add_bos_token": "yes", "bos_token": "<s>"})");
  expect_error<FormatError>([&] { load_tokenizer(dir); }, "add_bos_token");
  write_text(dir / "tokenizer_config.json", R"({"bos_token": "<s>", )");
  expect_error<FormatError>([&] { load_tokenizer(dir); }, "invalid JSON");
  // A valid config: {"content": ...} objects, flags, and special_tokens_map.json on top.
  write_text(
      dir / "tokenizer_config.json",
      R"({"bos_token": {"content": "<s>", "__type": "AddedToken"}, "add_bos_token": true, "eos_token": "ab"})");
  write_text(dir / "special_tokens_map.json", R"({"eos_token": "a", "pad_token": {"content": "b"}})");
  auto tok = load_tokenizer(dir);
  EXPECT_EQ(tok->special().bos, 5);
  EXPECT_EQ(tok->special().eos, 0);
  EXPECT_EQ(tok->special().pad, 1);
  EXPECT_EQ(tok->encode("ab", true), (std::vector<std::int32_t>{5, 2}));
}

TEST(Malformed, GarbageSentencePieceModel) {
  auto dir = scratch_dir("spm-garbage");
  const char garbage[] = "\x0a\x05hello\x12\xff\xff\xff garbage";
  write_text(dir / "tokenizer.model", std::string(garbage, sizeof garbage - 1));
  expect_error<FormatError>([&] { load_tokenizer(dir); }, "tokenizer.model");
  write_text(dir / "tokenizer.model", "");
  EXPECT_THROW(load_tokenizer(dir), FormatError);
  expect_error<IoError>([&] { load_tokenizer(dir / "missing.model"); }, "missing.model");
}

}  // namespace
}  // namespace ctune::tok::test
