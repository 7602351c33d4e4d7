// JSONL / JSON-array record reading; see records.h.
#include "data/records.h"

#include <sstream>

#include "core/error.h"
#include "core/regular_file.h"

namespace ctune::data {
namespace {

bool is_blank(const std::string& s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  return true;
}

// Peeks at the first non-blank byte (after a UTF-8 byte order mark) without consuming input.
char first_byte(std::ifstream& in) {
  static const char kBom[] = "\xEF\xBB\xBF";
  const std::streampos start = in.tellg();
  char c = 0, result = 0;
  for (int n = 0; in.get(c); ++n) {
    if (n < 3 && c == kBom[n]) continue;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    result = c;
    break;
  }
  in.clear();
  in.seekg(start);
  return result;
}

// std::getline with a cap: false at the end of input; a line longer than `cap` is read to its
// end but not stored (`*too_long` set, `line` holds its first `cap` bytes). Adds the bytes it
// consumed to `*consumed`.
bool read_line(std::istream& in, std::string& line, std::size_t cap, bool* too_long, std::uint64_t* consumed) {
  line.clear();
  *too_long = false;
  std::streambuf* buf = in.rdbuf();
  int c = buf->sbumpc();
  if (c == std::char_traits<char>::eof()) {
    in.setstate(std::ios::eofbit);
    return false;
  }
  for (; c != std::char_traits<char>::eof() && c != '\n'; c = buf->sbumpc()) {
    ++*consumed;
    if (line.size() < cap) {
      line.push_back(static_cast<char>(c));
    } else {
      *too_long = true;
    }
  }
  *consumed += c == '\n';
  return true;
}

void require_object(const OrderedJson& value, const std::string& where) {
  if (!value.is_object())
    throw FormatError(where + ": expected a JSON object, found " + json_type_name(value));
}

}  // namespace

RecordReader::RecordReader(const std::filesystem::path& path) : name_(path.string()) {
  require_regular_file(path, "a dataset file");  // a FIFO or /dev/zero would never end
  in_.open(path, std::ios::binary);
  if (!in_) throw IoError(name_ + ": cannot open for reading");
  std::error_code size_ec;
  file_bytes_ = std::filesystem::file_size(path, size_ec);
  if (size_ec) file_bytes_ = 0;
  if (first_byte(in_) == '[') {
    array_mode_ = true;
    if (file_bytes_ > kMaxJsonArrayFileBytes) {
      throw FormatError(name_ + ": a JSON array dataset of " + std::to_string(file_bytes_) + " bytes is read whole; more than " +
                        std::to_string(kMaxJsonArrayFileBytes) + " is refused (write it as JSONL, one record per line)");
    }
    std::ostringstream ss;
    ss << in_.rdbuf();
    std::string text = ss.str();
    if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
    array_ = parse_json_ordered(text, name_);
    in_.close();
  }
}

bool RecordReader::next(Record& out) {
  if (array_mode_) {
    if (index_ >= array_.size()) return false;
    out.where = name_ + "[" + std::to_string(index_) + "]";
    // Moved out: each element is read once, and the array is not kept twice in memory.
    out.value = std::move(array_[index_++]);
    require_object(out.value, out.where);
    return true;
  }
  std::string line;
  bool too_long = false;
  while (read_line(in_, line, kMaxRecordBytes, &too_long, &bytes_read_)) {
    ++line_;
    if (too_long) {
      throw FormatError(name_ + ":" + std::to_string(line_) + ": a record longer than " + std::to_string(kMaxRecordBytes) +
                        " bytes (a dataset line is one example; split long documents)");
    }
    if (line_ == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (is_blank(line)) continue;
    out.where = name_ + ":" + std::to_string(line_);
    out.value = parse_json_ordered(line, out.where);
    require_object(out.value, out.where);
    return true;
  }
  if (in_.bad()) throw IoError(name_ + ": read failed after line " + std::to_string(line_));
  return false;
}

std::uint64_t RecordReader::bytes_read() const {
  if (!array_mode_) return bytes_read_;
  return array_.empty() ? file_bytes_ : static_cast<std::uint64_t>(static_cast<double>(file_bytes_) * static_cast<double>(index_) / static_cast<double>(array_.size()));
}

std::optional<std::string> string_column(const OrderedJson& record, const std::string& key, std::string_view option,
                                         const std::string& where, bool required) {
  auto it = record.find(key);
  if (it == record.end() || (it->is_null() && !required)) {
    if (!required) return std::nullopt;
    throw FormatError(where + ": missing key \"" + key + "\" (" + std::string(option) + ")");
  }
  if (!it->is_string())
    throw FormatError(where + ": key \"" + key + "\" expected a string, found " + json_type_name(*it) + " (" +
                      it->dump().substr(0, 40) + ") (" + std::string(option) + ")");
  return it->get<std::string>();
}

}  // namespace ctune::data
