// Protobuf wire format, as much as a ModelProto needs: varints (wire type 0), 64-bit (1),
// length-delimited (2) and 32-bit (5) fields; groups (3, 4) do not occur in this message and are
// refused. Every length is checked against the bytes left.
#include "export/spm_model_file.h"

#include <cstring>

#include "core/error.h"
#include "io/file.h"

namespace ctune::exporter {

namespace {

class Wire {
 public:
  Wire(const char* data, std::size_t size, const std::string& where, std::size_t base)
      : p_(data), size_(size), where_(where), base_(base) {}

  bool done() const { return pos_ >= size_; }

  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= size_) fail("truncated varint");
      const auto b = static_cast<std::uint8_t>(p_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
    return 0;
  }
  // Reads a field key: (field number, wire type).
  std::pair<std::uint64_t, int> key() {
    const auto k = varint();
    return {k >> 3, static_cast<int>(k & 7)};
  }
  Wire sub() {
    const auto n = varint();
    if (n > size_ - pos_) fail("length-delimited field of " + std::to_string(n) + " bytes past the end");
    Wire w(p_ + pos_, n, where_, base_ + pos_);
    pos_ += n;
    return w;
  }
  std::string bytes() {
    Wire w = sub();
    return std::string(w.p_, w.size_);
  }
  float fixed32_float() {
    if (size_ - pos_ < 4) fail("truncated 32-bit field");
    float f;
    std::memcpy(&f, p_ + pos_, 4);
    pos_ += 4;
    return f;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1:
        if (size_ - pos_ < 8) fail("truncated 64-bit field");
        pos_ += 8;
        return;
      case 2: sub(); return;
      case 5:
        if (size_ - pos_ < 4) fail("truncated 32-bit field");
        pos_ += 4;
        return;
      default: fail("unexpected wire type " + std::to_string(wire_type));
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(where_ + ": not a SentencePiece model (" + what + " at byte " + std::to_string(base_ + pos_) + ")");
  }

 private:
  const char* p_;
  std::size_t size_;
  std::size_t pos_ = 0;
  const std::string& where_;
  std::size_t base_;
};

SpmPiece read_piece(Wire w) {
  SpmPiece piece;
  while (!w.done()) {
    auto [field, type] = w.key();
    if (field == 1 && type == 2) {
      piece.piece = w.bytes();
    } else if (field == 2 && type == 5) {
      piece.score = w.fixed32_float();
    } else if (field == 3 && type == 0) {
      piece.type = static_cast<std::int32_t>(w.varint());
      if (piece.type < 1 || piece.type > 6) w.fail("piece type " + std::to_string(piece.type));
    } else {
      w.skip(type);
    }
  }
  return piece;
}

}  // namespace

SpmModelFile read_spm_model_bytes(const std::string& bytes, const std::string& where) {
  SpmModelFile out;
  Wire w(bytes.data(), bytes.size(), where, 0);
  while (!w.done()) {
    auto [field, type] = w.key();
    if (field == 1 && type == 2) {
      out.pieces.push_back(read_piece(w.sub()));
    } else if (field == 2 && type == 2) {
      Wire t = w.sub();
      while (!t.done()) {
        auto [f, ty] = t.key();
        if (f == 3 && ty == 0) out.model_type = static_cast<std::int32_t>(t.varint());
        else if (f == 35 && ty == 0) out.byte_fallback = t.varint() != 0;
        else t.skip(ty);
      }
    } else if (field == 3 && type == 2) {
      Wire n = w.sub();
      while (!n.done()) {
        auto [f, ty] = n.key();
        if (f == 3 && ty == 0) out.add_dummy_prefix = n.varint() != 0;
        else if (f == 4 && ty == 0) out.remove_extra_whitespaces = n.varint() != 0;
        else n.skip(ty);
      }
    } else {
      w.skip(type);
    }
  }
  if (out.pieces.empty()) throw FormatError(where + ": SentencePiece model has no pieces");
  return out;
}

SpmModelFile read_spm_model_file(const std::filesystem::path& path) {
  return read_spm_model_bytes(io::read_text_file(path), path.string());
}

}  // namespace ctune::exporter
