// write_byte_tokenizer: a byte-level BPE tokenizer.json with no merges, for randomly initialised
// models (`ctune init --tokenizer byte`). Ids 0..255 are the 256 bytes in GPT-2's
// bytes-to-unicode order (the order of the first 256 entries of GPT-2's vocab.json: printable
// bytes '!'..'~', '¡'..'¬', '®'..'ÿ', then the remaining bytes), <s> is 256 and </s> is 257.
// Every text encodes to one token per byte, so the tokenizer is lossless. Files are written to
// a temporary name, fsynced and renamed, so a crash never leaves a half-written tokenizer.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ctune::tok {
namespace {

// Insertion-ordered JSON, so the written vocabulary reads in id order.
using OJson = nlohmann::ordered_json;

OJson added_token(const char* content, int id) {
  return OJson{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
               {"rstrip", false}, {"normalized", false}, {"special", true}};
}

}  // namespace

void write_byte_tokenizer(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir.string() + ": cannot create directory (" + ec.message() + ")");

  OJson vocab = OJson::object();
  const auto& order = gpt2_byte_order();
  const auto& chars = byte_to_unicode();
  for (int id = 0; id < 256; ++id) vocab[chars[order[static_cast<std::size_t>(id)]]] = id;

  OJson tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", OJson::array({added_token("<s>", 256), added_token("</s>", 257)})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", OJson::array({OJson{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                 OJson{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", OJson::array({OJson{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                               OJson{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                               OJson{{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                               OJson{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", OJson::array()}}},
  };
  OJson config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", 1000000},
  };
  io::write_file_atomic(dir / "tokenizer.json", tokenizer.dump(2, ' ', false) + "\n");
  io::write_file_atomic(dir / "tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace ctune::tok
