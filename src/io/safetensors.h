// safetensors (torch-free): header parsing with every check of the reference reader, a mapped
// file that hands out tensor bytes, and a writer that lays tensors out as the reference writer
// does (alignment-descending then name order, header padded to 8 bytes, {"format":"pt"}).
// Format facts: docs/formats.md#safetensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/file.h"

namespace ctune::io {

enum class DType { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

std::optional<DType> dtype_from_name(std::string_view name);
const char* dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);

constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets in the data buffer, end exclusive
  std::uint64_t end = 0;

  std::uint64_t numel() const;
  std::uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::uint64_t header_size = 0;  // N: the JSON header's length
  std::vector<TensorInfo> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;

  std::uint64_t data_start() const { return 8 + header_size; }
  const TensorInfo* find(std::string_view name) const;
};

// Parses the header and validates it against a file of `file_size` bytes whose first
// `available` bytes are at `bytes`. `where` names the file in errors. Throws FormatError.
SafetensorsHeader parse_safetensors_header(const std::uint8_t* bytes, std::uint64_t available,
                                           std::uint64_t file_size, const std::string& where);

// A validated, memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);

  const SafetensorsHeader& header() const { return header_; }
  const std::filesystem::path& path() const { return map_->path(); }
  const std::shared_ptr<MappedFile>& mapping() const { return map_; }
  // First byte of a tensor inside the mapping.
  std::uint8_t* data(const TensorInfo& t) const { return map_->mutable_data() + header_.data_start() + t.begin; }

 private:
  std::shared_ptr<MappedFile> map_;
  SafetensorsHeader header_;
};

// A tensor to write: contiguous little-endian bytes, nbytes == numel * dtype_size.
struct TensorBytes {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::uint64_t nbytes = 0;
};

// Writes atomically (temporary file + rename). Always adds metadata format=pt.
// Throws FormatError for duplicate names or byte counts that disagree with shape x dtype.
void write_safetensors(const std::filesystem::path& path, std::vector<TensorBytes> tensors,
                       std::map<std::string, std::string> metadata = {});

}  // namespace ctune::io
