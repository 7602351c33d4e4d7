#include "train/observe/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "io/file.h"

namespace ctune::train {
namespace fs = std::filesystem;

namespace {

// The reflected Castagnoli polynomial's table, built once.
const std::array<std::uint32_t, 256>& crc_table() {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protocol buffer wire format: a field key is (number << 3) | wire type; 0 varint, 1 64-bit,
// 2 length-delimited, 5 32-bit; all little-endian.
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <typename T>
void fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(b, sizeof(T));
}
void bytes_field(std::string& out, int number, const std::string& bytes) {
  varint(out, static_cast<std::uint64_t>(number) << 3 | 2);
  varint(out, bytes.size());
  out += bytes;
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary). Summary: repeated Value value = 1. Value: tag = 1 (string),
// simple_value = 2 (float).
std::string event(double wall_time, std::int64_t step) {
  std::string e;
  varint(e, 1 << 3 | 1);
  fixed(e, wall_time);
  if (step != 0) {
    varint(e, 2 << 3 | 0);
    varint(e, static_cast<std::uint64_t>(step));
  }
  return e;
}

// The step of an encoded Event (0 when absent); false when the bytes are not a well-formed message.
bool event_step(const std::string& e, std::int64_t* step) {
  *step = 0;
  std::size_t i = 0;
  auto read_varint = [&](std::uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && i < e.size(); shift += 7) {
      const auto b = static_cast<std::uint8_t>(e[i++]);
      *v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (i < e.size()) {
    std::uint64_t key = 0, v = 0;
    if (!read_varint(&key)) return false;
    switch (key & 7) {
      case 0:
        if (!read_varint(&v)) return false;
        if ((key >> 3) == 2) *step = static_cast<std::int64_t>(v);
        break;
      case 1: i += 8; break;
      case 2:
        if (!read_varint(&v)) return false;
        i += v;
        break;
      case 5: i += 4; break;
      default: return false;
    }
    if (i > e.size()) return false;
  }
  return true;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n) {
  const auto& t = crc_table();
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  const std::uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(dir.string() + ": cannot create the TensorBoard directory (" + ec.message() + ")");
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const double now = unix_seconds();
  // One file per session; a second session within the same second gets a suffix.
  const std::string base = "events.out.tfevents." + std::to_string(static_cast<long long>(now)) + "." + host;
  path_ = dir / base;
  for (int n = 1; fs::exists(path_); ++n) path_ = dir / (base + "." + std::to_string(n));
  file_ = io::create_exclusive(path_);
  std::string first = event(now, 0);
  bytes_field(first, 3, "brain.Event:2");
  record(first);
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::record(const std::string& bytes) {
  std::string framed;
  const std::uint64_t length = bytes.size();
  fixed(framed, length);
  fixed(framed, masked_crc32c(framed.data(), 8));
  framed += bytes;
  fixed(framed, masked_crc32c(bytes.data(), bytes.size()));
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size() || std::fflush(file_) != 0) {
    throw IoError(path_.string() + ": write failed (disk full?)");
  }
}

void EventWriter::scalars(std::int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(value, 1, tag);
    varint(value, 2 << 3 | 5);
    fixed(value, static_cast<float>(v));
    bytes_field(summary, 1, value);
  }
  std::string e = event(wall_time, step);
  bytes_field(e, 5, summary);
  record(e);
}

void truncate_events(const fs::path& dir, std::int64_t step) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) != 0) continue;
    const std::string data = io::read_text_file(entry.path());
    std::string kept;
    std::size_t at = 0;
    // Whole records with valid checksums, in order; a torn or damaged tail ends the file.
    while (at + 12 <= data.size()) {
      std::uint64_t length = 0;
      std::uint32_t length_crc = 0, data_crc = 0;
      std::memcpy(&length, data.data() + at, 8);
      std::memcpy(&length_crc, data.data() + at + 8, 4);
      if (length_crc != masked_crc32c(data.data() + at, 8) || length > data.size() - at - 16) break;
      const std::string bytes = data.substr(at + 12, length);
      std::memcpy(&data_crc, data.data() + at + 12 + length, 4);
      std::int64_t s = 0;
      if (data_crc != masked_crc32c(bytes.data(), bytes.size()) || !event_step(bytes, &s)) break;
      if (s <= step) kept.append(data, at, 16 + length);
      at += 16 + length;
    }
    if (kept.size() != data.size()) io::write_file_atomic(entry.path(), kept);
  }
}

}  // namespace ctune::train
