// Malformed GGUF files are refused with one clear line (a ctune::Error whose message names the
// file and the problem), never a crash: a table of targeted corruptions, every truncation of a
// valid file, and random byte flips in the header.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace ctune::io {
namespace {

using Bytes = std::vector<std::uint8_t>;

// Builds a GGUF image by hand, so fields can be made wrong on purpose.
struct Image {
  Bytes b;
  void u32(std::uint32_t v) { append(&v, 4); }
  void u64(std::uint64_t v) { append(&v, 8); }
  void i64(std::int64_t v) { append(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void append(const void* p, std::size_t n) {
    const auto* c = static_cast<const std::uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
  void pad(std::size_t alignment = 32) {
    while (b.size() % alignment) b.push_back(0);
  }
};

// Header with n_tensors / n_kv, then `body` writes KVs and tensor infos; a data section of
// `data_bytes` zeros follows the aligned header.
Bytes image(std::uint64_t n_tensors, std::uint64_t n_kv, const std::function<void(Image&)>& body,
            std::size_t data_bytes = 0, std::uint32_t version = 3) {
  Image im;
  im.u32(kGgufMagic);
  im.u32(version);
  im.u64(n_tensors);
  im.u64(n_kv);
  body(im);
  im.pad();
  im.b.resize(im.b.size() + data_bytes, 0);
  return im.b;
}

void tensor_info(Image& im, const std::string& name, std::vector<std::int64_t> ne, std::uint32_t type,
                 std::uint64_t offset) {
  im.str(name);
  im.u32(static_cast<std::uint32_t>(ne.size()));
  for (auto d : ne) im.i64(d);
  im.u32(type);
  im.u64(offset);
}

// Parsing throws a ctune::Error with a one-line message containing `expect`.
void expect_refused(const Bytes& b, const std::string& expect, const std::string& label) {
  try {
    parse_gguf(b.data(), b.size(), "bad.gguf");
    ADD_FAILURE() << label << ": accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << label << ": " << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << label << ": expected \"" << expect << "\" in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << label << ": " << msg;
  }
}

TEST(GgufMalformed, TargetedCorruptionsAreRefused) {
  auto kv_u32 = [](Image& im, const std::string& key, std::uint32_t v) {
    im.str(key);
    im.u32(4);
    im.u32(v);
  };
  const auto ok = image(1, 1, [&](Image& im) {
    kv_u32(im, "a.b", 1);
    tensor_info(im, "t", {4}, 0, 0);
  }, 16);
  EXPECT_NO_THROW(parse_gguf(ok.data(), ok.size(), "ok.gguf"));

  Bytes magic = ok;
  magic[0] = 'X';
  expect_refused(magic, "not a GGUF file", "magic");
  expect_refused(image(0, 0, [](Image&) {}, 0, 1), "unsupported GGUF version 1", "version 1");
  expect_refused(image(0, 0, [](Image&) {}, 0, 4), "unsupported GGUF version 4", "version 4");
  expect_refused(image(0, 1ull << 60, [](Image&) {}), "key-value count", "huge KV count");
  expect_refused(image(1ull << 59, 0, [](Image&) {}), "tensor count", "huge tensor count");
  expect_refused(image(0, 1, [](Image& im) { im.u64(1ull << 62); }, 64), "truncated", "huge key length");
  expect_refused(image(0, 1, [](Image& im) { im.str(""); im.u32(4); im.u32(0); }), "is empty", "empty key");
  expect_refused(image(0, 2, [&](Image& im) { kv_u32(im, "k", 1); kv_u32(im, "k", 2); }), "duplicate GGUF key k",
                 "duplicate key");
  expect_refused(image(0, 1, [](Image& im) { im.str("k"); im.u32(13); }), "unknown GGUF value type 13", "value type");
  expect_refused(image(0, 1, [](Image& im) { im.str("k"); im.u32(9); im.u32(9); im.u64(1); }), "arrays of arrays",
                 "nested array");
  expect_refused(image(0, 1, [](Image& im) { im.str("k"); im.u32(9); im.u32(8); im.u64(1ull << 40); }),
                 "does not fit", "huge string array");
  expect_refused(image(0, 1, [](Image& im) { im.str("k"); im.u32(9); im.u32(6); im.u64(1ull << 40); }),
                 "does not fit", "huge float array");
  expect_refused(image(0, 1, [](Image& im) { im.str("k"); im.u32(7); im.b.push_back(2); }), "bool value 2", "bool");
  expect_refused(image(0, 1, [](Image& im) { im.str("general.alignment"); im.u32(5); im.u32(32); }),
                 "general.alignment must be a u32", "alignment type");
  expect_refused(image(0, 1, [&](Image& im) { kv_u32(im, "general.alignment", 48); }), "power of two",
                 "alignment 48");
  expect_refused(image(0, 1, [&](Image& im) { kv_u32(im, "general.alignment", 4); }), "multiple of 8",
                 "alignment 4");
  expect_refused(image(2, 0, [](Image& im) { tensor_info(im, "t", {4}, 0, 0); tensor_info(im, "t", {4}, 0, 32); }, 64),
                 "duplicate tensor name t", "duplicate tensor");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, std::string(64, 'n'), {4}, 0, 0); }, 16),
                 "at most 63", "long name");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {1, 1, 1, 1, 1}, 0, 0); }, 16),
                 "5 dimensions", "five dims");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {-4}, 0, 0); }, 16), "negative dimension",
                 "negative dim");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {1ll << 40, 1ll << 40}, 0, 0); }, 16),
                 "overflows", "numel overflow");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {4}, 12, 0); }, 16), "not supported by ctune",
                 "Q4_K");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {4}, 1000, 0); }, 16), "invalid ggml type 1000",
                 "bad type");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {48}, 8, 0); }, 64), "block size 32",
                 "q8_0 row");
  // No dimensions: one value, not a row to index (read past an empty vector before; found by fuzzing).
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {}, 8, 0); }, 64), "rows of 1 values are not a multiple of its block size 32",
                 "q8_0 scalar");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {4}, 0, 8); }, 64), "expected 0",
                 "misaligned offset");
  expect_refused(image(2, 0, [](Image& im) { tensor_info(im, "a", {4}, 0, 0); tensor_info(im, "b", {4}, 0, 16); }, 64),
                 "expected 32", "overlapping tensor");
  expect_refused(image(1, 0, [](Image& im) { tensor_info(im, "t", {64}, 0, 0); }, 32), "past the end",
                 "data past the end");
}

Bytes valid_file() {
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::strings({"a", "b", "c"}));
  w.set("x.f32s", GgufValue::f32_array({1, 2, 3}));
  std::vector<float> v(64, 1.0f);
  w.add_tensor("w", GgmlType::Q8_0, {32, 2}, [v] { return encode_ggml(GgmlType::Q8_0, v.data(), v.size()); });
  w.add_tensor("n", GgmlType::F32, {3}, [] { return Bytes(12, 0); });
  return w.to_bytes();
}

TEST(GgufMalformed, EveryTruncationIsRefused) {
  const Bytes full = valid_file();
  const GgufHeader h = parse_gguf(full.data(), full.size(), "full.gguf");
  // Cutting anywhere before the end of the last tensor's data must be refused.
  const std::uint64_t needed = h.data_start + h.tensors.back().offset + h.tensors.back().nbytes;
  for (std::uint64_t n = 0; n < needed; ++n) {
    Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      parse_gguf(cut.data(), cut.size(), "bad.gguf");
      ADD_FAILURE() << "accepted a file cut to " << n << " of " << needed << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

TEST(GgufMalformed, RandomByteFlipsNeverCrash) {
  const Bytes full = valid_file();
  const GgufHeader h = parse_gguf(full.data(), full.size(), "full.gguf");
  std::mt19937 gen(1234);
  std::uniform_int_distribution<std::size_t> pos(0, h.data_start - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    Bytes b = full;
    for (int k = 0; k < 1 + i % 3; ++k) b[pos(gen)] = static_cast<std::uint8_t>(byte(gen));
    try {
      parse_gguf(b.data(), b.size(), "fuzz.gguf");
    } catch (const Error& e) {
      ++refused;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace ctune::io
