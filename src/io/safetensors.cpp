#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "core/progress.h"

namespace ctune::io {

namespace {
struct DTypeEntry {
  DType dtype;
  const char* name;
  std::size_t size;
};
// Order follows the reference enum, which is also increasing alignment.
constexpr DTypeEntry kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},   {DType::I8, "I8", 1},     {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::I16, "I16", 2}, {DType::U16, "U16", 2}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I32, "I32", 4}, {DType::U32, "U32", 4}, {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},   {DType::I64, "I64", 8}, {DType::U64, "U64", 8},
};

const DTypeEntry& entry(DType d) { return kDTypes[static_cast<int>(d)]; }

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

std::uint64_t read_u64_le(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorInfo parse_tensor_entry(const std::string& name, const Json& v, const std::string& where) {
  const std::string at = where + ": tensor \"" + name + "\"";
  if (!v.is_object()) throw FormatError(at + ": expected an object, found " + json_type_name(v));
  TensorInfo t;
  t.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) throw FormatError(at + ": missing string \"dtype\"");
  auto parsed = dtype_from_name(dt->get<std::string>());
  if (!parsed) throw FormatError(at + ": unknown dtype \"" + dt->get<std::string>() + "\"");
  t.dtype = *parsed;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) throw FormatError(at + ": missing array \"shape\"");
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      throw FormatError(at + ": shape entries must be non-negative integers, found " + d.dump());
    }
    t.shape.push_back(d.get<std::int64_t>());
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    throw FormatError(at + ": \"data_offsets\" must be [begin, end] with non-negative integers");
  }
  t.begin = (*off)[0].get<std::uint64_t>();
  t.end = (*off)[1].get<std::uint64_t>();
  if (t.end < t.begin) {
    throw FormatError(at + ": data_offsets end " + std::to_string(t.end) + " is before begin " +
                      std::to_string(t.begin));
  }
  std::uint64_t bytes = entry(t.dtype).size;
  for (auto d : t.shape) {
    if (mul_overflows(bytes, static_cast<std::uint64_t>(d), &bytes)) {
      throw FormatError(at + ": shape " + shape_text(t.shape) + " overflows 64-bit byte count");
    }
  }
  if (bytes != t.nbytes()) {
    throw FormatError(at + ": byte count mismatch (expected " + std::to_string(bytes) + " bytes for " +
                      dtype_name(t.dtype) + " " + shape_text(t.shape) + ", found " +
                      std::to_string(t.nbytes()) + " from data_offsets)");
  }
  return t;
}
}  // namespace

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& e : kDTypes)
    if (name == e.name) return e.dtype;
  return std::nullopt;
}
const char* dtype_name(DType dtype) { return entry(dtype).name; }
std::size_t dtype_size(DType dtype) { return entry(dtype).size; }

std::uint64_t TensorInfo::numel() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);  // validated against overflow at parse time
  return n;
}

const TensorInfo* SafetensorsHeader::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsHeader parse_safetensors_header(const std::uint8_t* bytes, std::uint64_t available,
                                           std::uint64_t file_size, const std::string& where) {
  if (file_size < 8 || available < 8) {
    throw FormatError(where + ": file is " + std::to_string(file_size) +
                      " bytes, too short for a safetensors header (expected at least 8)");
  }
  SafetensorsHeader h;
  h.header_size = read_u64_le(bytes);
  if (h.header_size > kMaxHeaderSize) {
    throw FormatError(where + ": header length " + std::to_string(h.header_size) + " exceeds the limit of " +
                      std::to_string(kMaxHeaderSize) + " bytes");
  }
  if (8 + h.header_size > file_size || 8 + h.header_size > available) {
    throw FormatError(where + ": header length " + std::to_string(h.header_size) + " runs past the end of the " +
                      std::to_string(file_size) + "-byte file (truncated?)");
  }
  std::string text(reinterpret_cast<const char*>(bytes + 8), h.header_size);

  // nlohmann keeps the last of duplicate keys silently; record top-level keys as they stream by.
  std::set<std::string> seen;
  std::string duplicate;
  Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  check_json_depth(text, where);
  Json header;
  try {
    header = Json::parse(text, on_event);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number past double's
    std::string msg = e.what();
    auto pos = msg.find("] ");
    throw FormatError(where + ": header is not valid JSON (" + (pos == std::string::npos ? msg : msg.substr(pos + 2)) +
                      ")");
  }
  if (!duplicate.empty()) throw FormatError(where + ": tensor \"" + duplicate + "\" appears twice in the header");
  if (!header.is_object()) throw FormatError(where + ": header must be a JSON object, found " + json_type_name(header));

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw FormatError(where + ": __metadata__ must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          throw FormatError(where + ": __metadata__ value \"" + m.key() + "\" must be a string, found " +
                            json_type_name(*m));
        }
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_tensor_entry(it.key(), *it, where));
  }

  // Tensors must tile the data buffer exactly: no gaps, no overlaps, nothing after the last.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin != expected) {
      std::string what = t.begin < expected ? "overlaps" : "leaves a gap after";
      throw FormatError(where + ": tensor \"" + t.name + "\" at bytes [" + std::to_string(t.begin) + "," +
                        std::to_string(t.end) + ") " + what + " " +
                        (prev ? "tensor \"" + prev->name + "\"" : std::string("the start of the data")) +
                        " (expected begin " + std::to_string(expected) + ")");
    }
    expected = t.end;
    prev = &t;
  }
  const std::uint64_t data_bytes = file_size - 8 - h.header_size;
  if (expected != data_bytes) {
    throw FormatError(where + ": tensors cover " + std::to_string(expected) + " data bytes but the file holds " +
                      std::to_string(data_bytes) + (expected > data_bytes ? " (truncated?)" : " (trailing bytes)"));
  }
  return h;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  auto file = std::make_shared<SafetensorsFile>();
  file->map_ = MappedFile::open(path);
  file->header_ = parse_safetensors_header(file->map_->data(), file->map_->size(), file->map_->size(), path.string());
  return file;
}

void write_safetensors(const std::filesystem::path& path, std::vector<TensorBytes> tensors,
                       std::map<std::string, std::string> metadata) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second) throw FormatError(path.string() + ": tensor \"" + t.name + "\" given twice");
    std::uint64_t bytes = dtype_size(t.dtype);
    for (auto d : t.shape) {
      if (d < 0 || mul_overflows(bytes, static_cast<std::uint64_t>(d), &bytes)) {
        throw FormatError(path.string() + ": tensor \"" + t.name + "\" has an invalid shape " + shape_text(t.shape));
      }
    }
    if (bytes != t.nbytes) {
      throw FormatError(path.string() + ": tensor \"" + t.name + "\" has " + std::to_string(t.nbytes) +
                        " bytes, expected " + std::to_string(bytes));
    }
  }
  // Largest alignment first, then by name: every tensor starts aligned to its element size.
  std::sort(tensors.begin(), tensors.end(), [](const TensorBytes& a, const TensorBytes& b) {
    auto sa = dtype_size(a.dtype), sb = dtype_size(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  metadata["format"] = "pt";
  Json header = Json::object();
  header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(text.size()) >> (8 * i));

  AtomicFile out(path);
  out.write(len, 8);
  out.write(text);
  for (const auto& t : tensors) {
    out.write(t.data, t.nbytes);
    count_tensor_written(t.nbytes);
  }
  out.commit();
}

}  // namespace ctune::io
