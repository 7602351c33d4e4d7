// The GGUF reader. Every read is bounds-checked against the file size before anything is
// allocated (a count or length larger than the bytes left is refused outright), so a truncated,
// corrupted or hostile file yields one FormatError line, never a crash or a huge allocation.
// Checks mirror ggml's gguf loader: magic, version 2/3, non-empty unique keys, known value
// types, no arrays of arrays, general.alignment a u32 power of two (and, per the spec, a multiple
// of 8), tensor names unique and < 64 bytes, at most 4 dims, non-negative dims, ne[0] a multiple
// of the block size, and each tensor at exactly the next aligned offset, inside the file.
#include "io/gguf.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "core/error.h"

namespace ctune::io {

namespace {

class Cursor {
 public:
  Cursor(const std::uint8_t* data, std::uint64_t size, const std::string& where)
      : data_(data), size_(size), where_(where) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t left() const { return size_ - pos_; }

  void need(std::uint64_t n, const std::string& what) const {
    if (n > left()) {
      throw FormatError(where_ + ": GGUF file truncated in " + what + " at byte " + std::to_string(pos_) +
                        " (needs " + std::to_string(n) + " bytes, " + std::to_string(left()) + " left)");
    }
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::vector<std::uint8_t> bytes(std::uint64_t n, const std::string& what) {
    need(n, what);
    std::vector<std::uint8_t> out(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return out;
  }
  std::string string(const std::string& what) {
    const auto n = read<std::uint64_t>(what + " (length)");
    need(n, what);
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  const std::string& where_;
};

// A key or tensor name as it may appear in a one-line message: control bytes escaped, long
// names cut.
std::string shown(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 96)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return name.size() > 96 ? out + "..." : out;
}

bool known_value_type(std::uint32_t t) {
  return t <= static_cast<std::uint32_t>(GgufValueType::FLOAT64);
}

GgufValue read_value(Cursor& in, std::uint32_t raw_type, const std::string& where) {
  if (!known_value_type(raw_type))
    throw FormatError(where + ": unknown GGUF value type " + std::to_string(raw_type) + " (expected 0..12)");
  auto type = static_cast<GgufValueType>(raw_type);
  bool array = false;
  std::uint64_t count = 1;
  if (type == GgufValueType::ARRAY) {
    array = true;
    const auto elem = in.read<std::uint32_t>(where + " (array type)");
    if (!known_value_type(elem))
      throw FormatError(where + ": unknown GGUF array element type " + std::to_string(elem) + " (expected 0..12)");
    type = static_cast<GgufValueType>(elem);
    if (type == GgufValueType::ARRAY)
      throw FormatError(where + ": arrays of arrays are not allowed (llama.cpp refuses them)");
    count = in.read<std::uint64_t>(where + " (array length)");
  }
  if (type == GgufValueType::STRING) {
    // Each string takes at least its 8-byte length: refuse impossible counts before allocating.
    if (count > in.left() / 8)
      throw FormatError(where + ": array of " + std::to_string(count) + " strings does not fit in the " +
                        std::to_string(in.left()) + " bytes left");
    std::vector<std::string> items;
    items.reserve(count);
    for (std::uint64_t i = 0; i < count; ++i) items.push_back(in.string(where));
    return array ? GgufValue::strings(std::move(items)) : GgufValue::string(std::move(items[0]));
  }
  const std::size_t size = gguf_value_size(type);
  if (count > in.left() / size)
    throw FormatError(where + ": array of " + std::to_string(count) + " " + gguf_value_type_name(type) +
                      " values does not fit in the " + std::to_string(in.left()) + " bytes left");
  auto bytes = in.bytes(count * size, where);
  if (type == GgufValueType::BOOL) {
    for (auto b : bytes)
      if (b > 1) throw FormatError(where + ": bool value " + std::to_string(b) + " (expected 0 or 1)");
  }
  return GgufValue::from_bytes(type, array, std::move(bytes), count);
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

}  // namespace

std::uint64_t GgufTensorInfo::numel() const {
  std::uint64_t n = 1;
  for (auto d : ne) n *= static_cast<std::uint64_t>(d);
  return n;
}

const GgufValue* GgufHeader::find(std::string_view key) const {
  for (const auto& [k, v] : kvs)
    if (k == key) return &v;
  return nullptr;
}

const GgufValue& GgufHeader::require(std::string_view key, const std::string& where) const {
  const GgufValue* v = find(key);
  if (!v) throw FormatError(where + ": missing GGUF key " + std::string(key));
  return *v;
}

const GgufTensorInfo* GgufHeader::find_tensor(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

GgufHeader parse_gguf(const std::uint8_t* bytes, std::uint64_t size, const std::string& where) {
  Cursor in(bytes, size, where);
  GgufHeader h;
  const auto magic = in.read<std::uint32_t>("the magic");
  if (magic != kGgufMagic) throw FormatError(where + ": not a GGUF file (the first 4 bytes are not \"GGUF\")");
  h.version = in.read<std::uint32_t>("the version");
  if (h.version != 2 && h.version != 3)
    throw FormatError(where + ": unsupported GGUF version " + std::to_string(h.version) + " (expected 3; 2 is read too)");
  const auto n_tensors = in.read<std::uint64_t>("the tensor count");
  const auto n_kv = in.read<std::uint64_t>("the key-value count");
  // A KV takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8 + 4 + 4 + 8.
  if (n_kv > in.left() / 13)
    throw FormatError(where + ": GGUF key-value count " + std::to_string(n_kv) + " does not fit in the file");
  if (n_tensors > in.left() / 24)
    throw FormatError(where + ": GGUF tensor count " + std::to_string(n_tensors) + " does not fit in the file");

  std::set<std::string> keys;
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = in.string("key " + std::to_string(i));
    if (key.empty()) throw FormatError(where + ": GGUF key " + std::to_string(i) + " is empty");
    if (!keys.insert(key).second) throw FormatError(where + ": duplicate GGUF key " + shown(key));
    const auto type = in.read<std::uint32_t>("the type of key " + shown(key));
    GgufValue value = read_value(in, type, where + ": " + shown(key));
    h.kvs.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = h.find("general.alignment")) {
    if (a->is_array() || a->type() != GgufValueType::UINT32)
      throw FormatError(where + ": general.alignment must be a u32, found " + a->describe());
    const auto alignment = static_cast<std::uint32_t>(a->as_int("general.alignment"));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment % 8 != 0)
      throw FormatError(where + ": general.alignment " + std::to_string(alignment) +
                        " is not a power of two and a multiple of 8");
    h.alignment = alignment;
  }

  std::set<std::string> names;
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = in.string("tensor info " + std::to_string(i));
    const std::string tw = where + ": tensor " + (t.name.empty() ? std::to_string(i) : shown(t.name));
    if (t.name.empty()) throw FormatError(tw + ": empty tensor name");
    if (t.name.size() > kGgufMaxNameBytes)
      throw FormatError(tw + ": name of " + std::to_string(t.name.size()) + " bytes (at most 63)");
    if (!names.insert(t.name).second) throw FormatError(where + ": duplicate tensor name " + shown(t.name));
    const auto n_dims = in.read<std::uint32_t>("the dims of " + shown(t.name));
    if (n_dims > kGgufMaxDims) throw FormatError(tw + ": " + std::to_string(n_dims) + " dimensions (at most 4)");
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = in.read<std::int64_t>("the dims of " + shown(t.name));
      if (ne < 0) throw FormatError(tw + ": negative dimension " + std::to_string(ne));
      if (ne > 0 && numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / static_cast<std::uint64_t>(ne))
        throw FormatError(tw + ": element count overflows");
      numel *= static_cast<std::uint64_t>(ne);
      t.ne.push_back(ne);
    }
    const auto type_id = in.read<std::uint32_t>("the type of " + shown(t.name));
    const auto type = ggml_type_from_id(type_id);
    if (!type) {
      if (type_id < 64)
        throw UnsupportedError(tw + ": ggml type " + std::to_string(type_id) +
                               " is not supported by ctune (F32, F16, BF16, Q8_0 and plain integers are)");
      throw FormatError(tw + ": invalid ggml type " + std::to_string(type_id));
    }
    t.type = *type;
    const std::size_t block = ggml_block_size(t.type);
    const std::int64_t row = t.ne.empty() ? 1 : t.ne[0];  // a tensor of no dimensions holds one value
    if (row % static_cast<std::int64_t>(block) != 0 || numel % block != 0)
      throw FormatError(tw + ": " + ggml_type_name(t.type) + " rows of " + std::to_string(row) +
                        " values are not a multiple of its block size " + std::to_string(block));
    if (numel > std::numeric_limits<std::uint64_t>::max() / 8) throw FormatError(tw + ": size overflows");
    t.nbytes = ggml_nbytes(t.type, numel);
    t.offset = in.read<std::uint64_t>("the offset of " + shown(t.name));
    h.tensors.push_back(std::move(t));
  }

  h.data_start = align_up(in.pos(), h.alignment);
  std::uint64_t expected = 0;
  for (const auto& t : h.tensors) {
    if (t.offset != expected)
      throw FormatError(where + ": tensor " + shown(t.name) + " at data offset " + std::to_string(t.offset) + " (expected " +
                        std::to_string(expected) + ": tensors follow each other, each aligned to " +
                        std::to_string(h.alignment) + " bytes)");
    if (t.nbytes > size || h.data_start + t.offset > size - t.nbytes)
      throw FormatError(where + ": tensor " + shown(t.name) + " (" + std::to_string(t.nbytes) + " bytes at file offset " +
                        std::to_string(h.data_start + t.offset) + ") extends past the end of the file (" +
                        std::to_string(size) + " bytes)");
    expected = align_up(t.offset + t.nbytes, h.alignment);
  }
  return h;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  auto file = std::shared_ptr<GgufFile>(new GgufFile());
  file->map_ = MappedFile::open(path);
  file->header_ = parse_gguf(file->map_->data(), file->map_->size(), path.string());
  return file;
}

std::vector<float> GgufFile::read_floats(const GgufTensorInfo& t) const {
  return decode_ggml(t.type, data(t), static_cast<std::size_t>(t.numel()), path().string() + ": tensor " + t.name);
}

}  // namespace ctune::io
