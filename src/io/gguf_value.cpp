// GgufValue: GGUF metadata values with typed, checked access. Numbers stay little-endian bytes
// (the file's representation), decoded on access; this machine-independent form is what the
// writer emits and what the reader hands out.
#include <cstring>

#include "core/error.h"
#include "io/gguf.h"

namespace ctune::io {

const char* gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: return "u8";
    case GgufValueType::INT8: return "i8";
    case GgufValueType::UINT16: return "u16";
    case GgufValueType::INT16: return "i16";
    case GgufValueType::UINT32: return "u32";
    case GgufValueType::INT32: return "i32";
    case GgufValueType::FLOAT32: return "f32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "u64";
    case GgufValueType::INT64: return "i64";
    case GgufValueType::FLOAT64: return "f64";
  }
  return "?";
}

std::size_t gguf_value_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY: return 0;
  }
  return 0;
}

namespace {

template <typename T>
GgufValue make_scalar(GgufValueType type, T v) {
  std::vector<std::uint8_t> bytes(sizeof(T));
  std::memcpy(bytes.data(), &v, sizeof(T));  // the build targets little-endian machines only
  return GgufValue::from_bytes(type, false, std::move(bytes), 1);
}

template <typename T>
GgufValue make_array(GgufValueType type, const std::vector<T>& v) {
  std::vector<std::uint8_t> bytes(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  return GgufValue::from_bytes(type, true, std::move(bytes), v.size());
}

template <typename T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

GgufValue GgufValue::u32(std::uint32_t v) { return make_scalar(GgufValueType::UINT32, v); }
GgufValue GgufValue::i32(std::int32_t v) { return make_scalar(GgufValueType::INT32, v); }
GgufValue GgufValue::u64(std::uint64_t v) { return make_scalar(GgufValueType::UINT64, v); }
GgufValue GgufValue::f32(float v) { return make_scalar(GgufValueType::FLOAT32, v); }
GgufValue GgufValue::f64(double v) { return make_scalar(GgufValueType::FLOAT64, v); }
GgufValue GgufValue::boolean(bool v) { return make_scalar(GgufValueType::BOOL, static_cast<std::uint8_t>(v ? 1 : 0)); }
GgufValue GgufValue::f32_array(const std::vector<float>& v) { return make_array(GgufValueType::FLOAT32, v); }
GgufValue GgufValue::i32_array(const std::vector<std::int32_t>& v) { return make_array(GgufValueType::INT32, v); }

GgufValue GgufValue::string(std::string v) {
  GgufValue out(GgufValueType::STRING, false);
  out.strings_.push_back(std::move(v));
  return out;
}

GgufValue GgufValue::strings(std::vector<std::string> v) {
  GgufValue out(GgufValueType::STRING, true);
  out.strings_ = std::move(v);
  return out;
}

GgufValue GgufValue::from_bytes(GgufValueType type, bool array, std::vector<std::uint8_t> bytes, std::size_t count) {
  const std::size_t size = gguf_value_size(type);
  if (size == 0 || bytes.size() != count * size || (!array && count != 1))
    throw FormatError(std::string("GGUF value of type ") + gguf_value_type_name(type) + ": inconsistent byte count");
  GgufValue out(type, array);
  out.count_ = count;
  out.bytes_ = std::move(bytes);
  return out;
}

std::string GgufValue::describe() const {
  if (!array_) return gguf_value_type_name(type_);
  return std::string("[") + gguf_value_type_name(type_) + " x " + std::to_string(size()) + "]";
}

std::int64_t GgufValue::int_at(std::size_t i, const std::string& where) const {
  if (i >= size()) throw FormatError(where + ": index " + std::to_string(i) + " outside " + describe());
  const std::uint8_t* p = bytes_.data() + i * gguf_value_size(type_);
  switch (type_) {
    case GgufValueType::UINT8: return load<std::uint8_t>(p);
    case GgufValueType::INT8: return load<std::int8_t>(p);
    case GgufValueType::UINT16: return load<std::uint16_t>(p);
    case GgufValueType::INT16: return load<std::int16_t>(p);
    case GgufValueType::UINT32: return load<std::uint32_t>(p);
    case GgufValueType::INT32: return load<std::int32_t>(p);
    case GgufValueType::INT64: return load<std::int64_t>(p);
    case GgufValueType::UINT64: {
      const auto v = load<std::uint64_t>(p);
      if (v > static_cast<std::uint64_t>(INT64_MAX)) throw FormatError(where + ": u64 value " + std::to_string(v) + " is too large");
      return static_cast<std::int64_t>(v);
    }
    default: throw FormatError(where + ": expected an integer, found " + describe());
  }
}

double GgufValue::float_at(std::size_t i, const std::string& where) const {
  if (i >= size()) throw FormatError(where + ": index " + std::to_string(i) + " outside " + describe());
  const std::uint8_t* p = bytes_.data() + i * gguf_value_size(type_);
  if (type_ == GgufValueType::FLOAT32) return load<float>(p);
  if (type_ == GgufValueType::FLOAT64) return load<double>(p);
  throw FormatError(where + ": expected a float, found " + describe());
}

bool GgufValue::bool_at(std::size_t i, const std::string& where) const {
  if (type_ != GgufValueType::BOOL) throw FormatError(where + ": expected a bool, found " + describe());
  if (i >= size()) throw FormatError(where + ": index " + std::to_string(i) + " outside " + describe());
  return bytes_[i] != 0;
}

const std::string& GgufValue::string_at(std::size_t i, const std::string& where) const {
  if (type_ != GgufValueType::STRING) throw FormatError(where + ": expected a string, found " + describe());
  if (i >= size()) throw FormatError(where + ": index " + std::to_string(i) + " outside " + describe());
  return strings_[i];
}

void GgufValue::expect_scalar(const std::string& where) const {
  if (array_) throw FormatError(where + ": expected a single value, found " + describe());
}

std::int64_t GgufValue::as_int(const std::string& where) const {
  expect_scalar(where);
  return int_at(0, where);
}

double GgufValue::as_float(const std::string& where) const {
  expect_scalar(where);
  return float_at(0, where);
}

bool GgufValue::as_bool(const std::string& where) const {
  expect_scalar(where);
  return bool_at(0, where);
}

const std::string& GgufValue::as_string(const std::string& where) const {
  expect_scalar(where);
  return string_at(0, where);
}

const std::vector<std::string>& GgufValue::string_array(const std::string& where) const {
  if (!array_ || type_ != GgufValueType::STRING)
    throw FormatError(where + ": expected an array of strings, found " + describe());
  return strings_;
}

}  // namespace ctune::io
