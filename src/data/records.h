// Reading a dataset file record by record: JSONL (one JSON object per line, blank lines
// ignored) or a JSON array of objects (recognised by its first non-blank byte, '['). Every
// record carries where it came from ("data/train.jsonl:17", "data/train.json[3]") so each later
// error can name it. A record that cannot be parsed throws a FormatError from next(); the reader
// stays usable, so a caller that skips bad records just catches and calls next() again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "core/json.h"

namespace ctune::data {

// A JSONL record (one line) longer than this is refused without being read whole: at ~4 bytes a
// token it is millions of tokens, past any sequence length, and parsing it would cost seconds
// and gigabytes. A JSON array file is parsed whole, so it is bounded as a file.
inline constexpr std::size_t kMaxRecordBytes = 16u << 20;
inline constexpr std::uint64_t kMaxJsonArrayFileBytes = 2ull << 30;

struct Record {
  OrderedJson value;       // always a JSON object
  std::string where;  // file:line (JSONL, 1-based) or file[index] (JSON array, 0-based)
};

class RecordReader {
 public:
  // Opens `path` (IoError when it cannot). A JSON array file is parsed here as a whole, so a
  // syntax error in it is a FormatError from the constructor (no record can be skipped).
  explicit RecordReader(const std::filesystem::path& path);

  // Reads the next record into `out`; false at the end of the file. Throws FormatError naming
  // the record for invalid JSON, a value that is not an object, or a line longer than
  // kMaxRecordBytes (skipped to its end, not stored).
  bool next(Record& out);

  bool is_json_array() const { return array_mode_; }
  // How far the reader is through the file, in bytes (a JSON array: in proportion to the records
  // read), and the file's size: the dataset's progress (core/progress.h).
  std::uint64_t bytes_read() const;
  std::uint64_t file_bytes() const { return file_bytes_; }

 private:
  std::string name_;  // the path as given, for messages
  std::ifstream in_;
  std::int64_t line_ = 0;
  bool array_mode_ = false;
  OrderedJson array_;
  std::size_t index_ = 0;
  std::uint64_t file_bytes_ = 0, bytes_read_ = 0;
};

// record[key] as a string, for the dataset columns. `option` is the recipe key that names the
// column ("data.columns.output"), quoted in messages so the user sees which setting to change.
// A missing or null key gives nullopt when !required, else FormatError
// "<where>: missing key \"output\" (data.columns.output)"; a value of another type is a
// FormatError naming the type found.
std::optional<std::string> string_column(const OrderedJson& record, const std::string& key, std::string_view option,
                                         const std::string& where, bool required);

}  // namespace ctune::data
