// GGUF, llama.cpp's model container (torch-free): metadata values, tensor infos and a reader
// that applies the checks ggml's own loader applies, so a file ctune accepts is a file
// llama.cpp accepts and a malformed one is refused with one line naming the file and the
// offending field. Layout (little-endian): magic "GGUF", version (3; 2 is read too), tensor
// count and KV count (u64); KVs (key string, u32 type, value); tensor infos (name, u32 n_dims,
// u64 ne[n_dims] with ne[0] the contiguous dimension, u32 ggml type, u64 offset); padding to
// general.alignment (default 32); the data section, each tensor at its aligned offset in order.
// Strings are a u64 length and bytes. Facts: docs/formats.md#gguf-container; the writer is gguf_writer.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/file.h"
#include "io/gguf_types.h"

namespace ctune::io {

inline constexpr std::uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr std::uint32_t kGgufVersion = 3;
inline constexpr std::uint32_t kGgufDefaultAlignment = 32;
inline constexpr std::size_t kGgufMaxNameBytes = 63;  // GGML_MAX_NAME (64) minus the NUL
inline constexpr std::size_t kGgufMaxDims = 4;

enum class GgufValueType : std::uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

const char* gguf_value_type_name(GgufValueType type);
// Bytes of one element of a fixed-size type; 0 for STRING and ARRAY.
std::size_t gguf_value_size(GgufValueType type);

// One metadata value: a scalar, or an array of scalars or strings (arrays of arrays are refused,
// as by llama.cpp). Numbers are kept as their little-endian bytes, so every type round-trips.
class GgufValue {
 public:
  static GgufValue u32(std::uint32_t v);
  static GgufValue i32(std::int32_t v);
  static GgufValue u64(std::uint64_t v);
  static GgufValue f32(float v);
  static GgufValue f64(double v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue strings(std::vector<std::string> v);
  static GgufValue f32_array(const std::vector<float>& v);
  static GgufValue i32_array(const std::vector<std::int32_t>& v);
  // A value of fixed-size element type from raw little-endian bytes (count elements).
  static GgufValue from_bytes(GgufValueType type, bool array, std::vector<std::uint8_t> bytes, std::size_t count);

  GgufValueType type() const { return type_; }  // the element type for arrays
  bool is_array() const { return array_; }
  std::size_t size() const { return type_ == GgufValueType::STRING ? strings_.size() : count_; }
  // "u32", "[f32 x 300]", ... for messages.
  std::string describe() const;

  // Element access; throw FormatError naming `where` when the type does not fit.
  std::int64_t int_at(std::size_t i, const std::string& where) const;  // any integer type
  double float_at(std::size_t i, const std::string& where) const;      // f32 / f64
  bool bool_at(std::size_t i, const std::string& where) const;
  const std::string& string_at(std::size_t i, const std::string& where) const;

  // Scalar access (FormatError for arrays or other types).
  std::int64_t as_int(const std::string& where) const;
  double as_float(const std::string& where) const;
  bool as_bool(const std::string& where) const;
  const std::string& as_string(const std::string& where) const;
  const std::vector<std::string>& string_array(const std::string& where) const;

  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  GgufValue(GgufValueType type, bool array) : type_(type), array_(array) {}
  void expect_scalar(const std::string& where) const;

  GgufValueType type_;
  bool array_;
  std::size_t count_ = 0;
  std::vector<std::uint8_t> bytes_;   // fixed-size elements
  std::vector<std::string> strings_;  // STRING elements
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<std::int64_t> ne;  // ggml order: ne[0] is the contiguous (fastest) dimension
  std::uint64_t offset = 0;      // relative to the data section
  std::uint64_t nbytes = 0;

  std::uint64_t numel() const;
  // PyTorch order: ne reversed ([out, in] for a Linear weight).
  std::vector<std::int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

struct GgufHeader {
  std::uint32_t version = kGgufVersion;
  std::vector<std::pair<std::string, GgufValue>> kvs;  // in file order
  std::vector<GgufTensorInfo> tensors;                 // in file order
  std::uint32_t alignment = kGgufDefaultAlignment;
  std::uint64_t data_start = 0;  // file offset of the data section

  const GgufValue* find(std::string_view key) const;
  // FormatError "<where>: missing key <key>" when absent.
  const GgufValue& require(std::string_view key, const std::string& where) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;
};

// Parses and validates a whole file image (`where` names it in errors). Throws FormatError for
// anything llama.cpp's loader would refuse and UnsupportedError for tensor types ctune does not
// know.
GgufHeader parse_gguf(const std::uint8_t* bytes, std::uint64_t size, const std::string& where);

// A validated, memory-mapped GGUF file.
class GgufFile {
 public:
  static std::shared_ptr<GgufFile> open(const std::filesystem::path& path);

  const GgufHeader& header() const { return header_; }
  const std::filesystem::path& path() const { return map_->path(); }
  const std::uint8_t* data(const GgufTensorInfo& t) const { return map_->data() + header_.data_start + t.offset; }
  // The tensor as fp32 values in ggml order (F32/F16/BF16/Q8_0; UnsupportedError otherwise).
  std::vector<float> read_floats(const GgufTensorInfo& t) const;

 private:
  std::shared_ptr<MappedFile> map_;
  GgufHeader header_;
};

}  // namespace ctune::io
