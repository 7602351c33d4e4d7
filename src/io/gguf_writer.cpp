// GgufWriter: serialises the header exactly as gguf.h describes it and streams tensor data
// from the producers, padding each tensor to the alignment.
#include "io/gguf_writer.h"

#include <cstring>
#include <set>

#include "core/error.h"
#include "core/progress.h"

namespace ctune::io {

namespace {

void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_i64(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_string(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

void put_value(std::string& out, const GgufValue& v) {
  if (v.is_array()) {
    put_u32(out, static_cast<std::uint32_t>(GgufValueType::ARRAY));
    put_u32(out, static_cast<std::uint32_t>(v.type()));
    put_u64(out, v.size());
  } else {
    put_u32(out, static_cast<std::uint32_t>(v.type()));
  }
  if (v.type() == GgufValueType::STRING) {
    for (std::size_t i = 0; i < v.size(); ++i) put_string(out, v.string_at(i, "value"));
  } else {
    out.append(reinterpret_cast<const char*>(v.bytes().data()), v.bytes().size());
  }
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

const char kZeros[256] = {};

}  // namespace

GgufWriter::GgufWriter(std::uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment % 8 != 0 || alignment > sizeof(kZeros))
    throw ConfigError("GGUF alignment " + std::to_string(alignment) + " is not a power of two in 8..256");
  kvs_.emplace_back("general.alignment", GgufValue::u32(alignment));
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key.empty()) throw ConfigError("GGUF: empty metadata key");
  for (const auto& kv : kvs_)
    if (kv.first == key) throw ConfigError("GGUF: metadata key " + key + " is set twice");
  kvs_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<std::int64_t> ne, Producer produce) {
  const std::string where = "GGUF tensor " + name;
  if (name.empty() || name.size() > kGgufMaxNameBytes)
    throw FormatError(where + ": name must have 1..63 bytes, found " + std::to_string(name.size()));
  for (const auto& t : tensors_)
    if (t.info.name == name) throw FormatError(where + ": added twice");
  if (ne.empty() || ne.size() > kGgufMaxDims)
    throw FormatError(where + ": " + std::to_string(ne.size()) + " dimensions (expected 1..4)");
  for (auto d : ne)
    if (d < 0) throw FormatError(where + ": negative dimension " + std::to_string(d));
  if (ne[0] % static_cast<std::int64_t>(ggml_block_size(type)) != 0)
    throw FormatError(where + ": rows of " + std::to_string(ne[0]) + " values cannot be stored as " +
                      ggml_type_name(type) + " (blocks of " + std::to_string(ggml_block_size(type)) + ")");
  Tensor t;
  t.info.name = name;
  t.info.type = type;
  t.info.ne = std::move(ne);
  t.info.nbytes = ggml_nbytes(type, t.info.numel());
  t.info.offset = data_size_;
  data_size_ = align_up(data_size_ + t.info.nbytes, alignment_);
  t.produce = std::move(produce);
  tensors_.push_back(std::move(t));
}

void GgufWriter::emit(const Sink& sink) const {
  std::string head;
  put_u32(head, kGgufMagic);
  put_u32(head, kGgufVersion);
  put_u64(head, tensors_.size());
  put_u64(head, kvs_.size());
  for (const auto& [key, value] : kvs_) {
    put_string(head, key);
    put_value(head, value);
  }
  for (const auto& t : tensors_) {
    put_string(head, t.info.name);
    put_u32(head, static_cast<std::uint32_t>(t.info.ne.size()));
    for (auto d : t.info.ne) put_i64(head, d);
    put_u32(head, static_cast<std::uint32_t>(t.info.type));
    put_u64(head, t.info.offset);
  }
  head.append(align_up(head.size(), alignment_) - head.size(), '\0');
  sink(head.data(), head.size());
  for (const auto& t : tensors_) {
    const std::vector<std::uint8_t> bytes = t.produce();
    if (bytes.size() != t.info.nbytes)
      throw FormatError("GGUF tensor " + t.info.name + ": produced " + std::to_string(bytes.size()) +
                        " bytes (expected " + std::to_string(t.info.nbytes) + ")");
    sink(bytes.data(), bytes.size());
    count_tensor_written(bytes.size());
    const std::uint64_t pad = align_up(bytes.size(), alignment_) - bytes.size();
    if (pad) sink(kZeros, pad);
  }
}

std::vector<std::uint8_t> GgufWriter::to_bytes() const {
  std::vector<std::uint8_t> out;
  emit([&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void GgufWriter::write(const std::filesystem::path& path) const {
  AtomicFile file(path);
  emit([&](const void* p, std::size_t n) { file.write(p, n); });
  file.commit();
}

}  // namespace ctune::io
