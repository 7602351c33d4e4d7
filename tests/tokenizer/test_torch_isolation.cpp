// SentencePiece in a process that links LibTorch (docs/build.md#sentencepiece-and-libtorch-in-one-process): this binary is
// linked against LibTorch (and so protobuf 3.21) without using it; loading a SentencePiece model
// through libctune_spm.so must still work and give the reference ids. Linked directly, the two
// protobuf runtimes crash at start-up or abort on a version check.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "test_support.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace ctune::tok::test {
namespace {

TEST(GoldenSpmBesideTorch, ProtobufRuntimesStayApart) {
  // LibTorch (and with it protobuf 3.21) is already in the process.
  ASSERT_NE(dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD), nullptr) << "LibTorch is not linked in";
  ASSERT_NE(dlopen("libprotobuf.so.32", RTLD_NOW | RTLD_NOLOAD), nullptr)
      << "LibTorch's protobuf is not loaded";
  Json ref = load_reference(data_dir() / "spm" / "bpe.json");
  if (ref.is_null()) return;
  auto tok = load_tokenizer(data_dir() / "spm" / "bpe.model");
  const auto corpus = load_corpus();
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    EXPECT_EQ(tok->encode(corpus[i], false), to_ids(ref["ids"][i])) << show(corpus[i]);
    EXPECT_EQ(tok->decode(tok->encode(corpus[i], false)), corpus[i]);
  }
}

}  // namespace
}  // namespace ctune::tok::test
