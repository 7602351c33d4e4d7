// Writing GGUF files (torch-free): metadata in insertion order, then tensor infos, then the data,
// each tensor at the next multiple of the alignment (default 32) with 0x00 padding, as ggml's
// loader requires. Tensor bytes are produced on demand while the file is written, so a
// converter never holds every converted tensor at once. Files are written atomically
// (temporary name, fsync, rename).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"

namespace ctune::io {

class GgufWriter {
 public:
  // Produces a tensor's bytes; called once, while the file is written.
  using Producer = std::function<std::vector<std::uint8_t>()>;

  // general.alignment is written with this value (a power of two, multiple of 8).
  explicit GgufWriter(std::uint32_t alignment = kGgufDefaultAlignment);

  // Adds a key; ConfigError for an empty or duplicate key (general.alignment is the writer's).
  void set(const std::string& key, GgufValue value);
  // ne in ggml order (ne[0] contiguous: a PyTorch [out, in] weight is ne = {in, out}).
  // FormatError for a duplicate or over-long name, more than 4 dims, or a ne[0] that is not a
  // multiple of the type's block size.
  void add_tensor(const std::string& name, GgmlType type, std::vector<std::int64_t> ne, Producer produce);

  std::size_t tensor_count() const { return tensors_.size(); }

  // The whole file in memory (tests, small files).
  std::vector<std::uint8_t> to_bytes() const;
  // Writes `path` atomically. IoError when the OS refuses; FormatError when a producer returns
  // the wrong number of bytes.
  void write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    GgufTensorInfo info;
    Producer produce;
  };
  using Sink = std::function<void(const void*, std::size_t)>;
  void emit(const Sink& sink) const;

  std::uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<Tensor> tensors_;
  std::uint64_t data_size_ = 0;  // running data-section size (aligned)
};

}  // namespace ctune::io
