// Streaming tokenizer.json reader: an nlohmann SAX handler that builds a DOM for everything but
// the contents of model.vocab and model.merges, which it appends to BpeTables as they stream by.
// Those two keys stay in the DOM as empty containers so the rest of the loader sees their shape.
#include "tokenizer/tokenizer_json.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/regular_file.h"

namespace ctune::tok {
namespace {

class Reader {
 public:
  Reader(TokenizerJson& out, std::string where) : out_(out), where_(std::move(where)) {}

  // --- nlohmann SAX interface ---
  bool null() { return value(Json(nullptr), "null"); }
  bool boolean(bool v) { return value(Json(v), "a boolean"); }
  bool number_integer(std::int64_t v) {
    if (mode_ == Mode::Vocab) return vocab_id(v);
    return value(Json(v), "an integer");
  }
  bool number_unsigned(std::uint64_t v) {
    if (mode_ == Mode::Vocab && v <= static_cast<std::uint64_t>(INT64_MAX))
      return vocab_id(static_cast<std::int64_t>(v));
    return value(Json(v), "an integer");
  }
  bool number_float(double v, const std::string&) { return value(Json(v), "a number"); }
  bool binary(Json::binary_t&) { return value(Json(), "binary data"); }
  bool string(std::string& s) {
    if (mode_ == Mode::Merges) {
      out_.tables.add_merge(s, merges_where());
    } else if (mode_ == Mode::MergePair) {
      if (pair_.size() == 2) return wrong_merge("an array of more than 2 strings");
      pair_.push_back(s);
    } else {
      return value(Json(std::move(s)), "a string");
    }
    return true;
  }
  bool key(std::string& k) {
    if (mode_ == Mode::Vocab)
      vocab_key_ = k;
    else
      key_ = k;
    return true;
  }
  bool start_object(std::size_t) {
    if (mode_ == Mode::None && at_model_member("vocab")) {
      open(Json::object());
      mode_ = Mode::Vocab;
      out_.has_vocab = true;
      return true;
    }
    return open_container(Json::object(), "an object");
  }
  bool start_array(std::size_t) {
    if (mode_ == Mode::None && at_model_member("merges")) {
      open(Json::array());
      mode_ = Mode::Merges;
      return true;
    }
    if (mode_ == Mode::Merges) {
      mode_ = Mode::MergePair;
      pair_.clear();
      return true;
    }
    return open_container(Json::array(), "an array");
  }
  bool end_object() {
    if (mode_ == Mode::Vocab) mode_ = Mode::None;
    stack_.pop_back();
    return true;
  }
  bool end_array() {
    if (mode_ == Mode::MergePair) {
      if (pair_.size() != 2) return wrong_merge("an array of " + std::to_string(pair_.size()) + " strings");
      out_.tables.add_merge(pair_[0], pair_[1], merges_where());
      mode_ = Mode::Merges;
      return true;
    }
    if (mode_ == Mode::Merges) mode_ = Mode::None;
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    // nlohmann's message is "[json.exception.parse_error.101] parse error at line 1, column 3: ..."
    std::string msg = e.what();
    auto pos = msg.find("] ");
    if (pos != std::string::npos) msg = msg.substr(pos + 2);
    throw FormatError(where_ + ": invalid JSON (" + msg + ")");
  }

 private:
  enum class Mode { None, Vocab, Merges, MergePair };

  std::string merges_where() const { return where_ + ": model.merges"; }

  // The container about to open is root["model"]["vocab"] (or ["merges"]).
  bool at_model_member(const char* name) const {
    return stack_.size() == 2 && stack_[0] == &out_.root && stack_[0]->is_object() &&
           stack_[1]->is_object() && model_open_ && key_ == name;
  }

  bool vocab_id(std::int64_t id) {
    out_.tables.add_token(vocab_key_, id, where_ + ": model.vocab");
    return true;
  }
  bool wrong_merge(const std::string& found) {
    throw FormatError(merges_where() + "[" + std::to_string(out_.tables.merges.size()) +
                      "]: expected a string or a pair of strings, found " + found);
  }

  // Places a scalar in the DOM, unless a captured table expects something else.
  bool value(Json v, const std::string& type) {
    if (mode_ == Mode::Vocab) {
      throw FormatError(where_ + ": model.vocab: token \"" + vocab_key_ +
                        "\" expected an integer id, found " + type);
    }
    if (mode_ != Mode::None) return wrong_merge(type);
    place(std::move(v));
    return true;
  }
  bool open_container(Json v, const std::string& type) {
    if (mode_ == Mode::Vocab) return value(Json(), type);
    if (mode_ != Mode::None) return wrong_merge(type);
    open(std::move(v));
    return true;
  }
  Json* place(Json v) {
    if (stack_.empty()) {
      out_.root = std::move(v);
      return &out_.root;
    }
    Json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    Json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  void open(Json v) {
    const bool is_model = stack_.size() == 1 && key_ == "model";
    stack_.push_back(place(std::move(v)));
    if (stack_.size() == 2) model_open_ = is_model;
  }

  TokenizerJson& out_;
  std::string where_;
  std::vector<Json*> stack_;  // open containers; parents never grow while a child is open
  std::string key_;           // key of the next DOM value
  std::string vocab_key_;     // token whose id comes next
  std::vector<std::string> pair_;
  Mode mode_ = Mode::None;
  bool model_open_ = false;  // stack_[1] is root["model"]
};

}  // namespace

TokenizerJson read_tokenizer_json(const std::filesystem::path& path) {
  require_regular_file(path, "a tokenizer.json");  // before the size cap: /dev/zero has no size
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open for reading");
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > kMaxJsonFileBytes) {
    throw FormatError(path.string() + ": " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(kMaxJsonFileBytes) + " a tokenizer.json may have");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(path.string() + ": read failed");
  const std::string text = ss.str();
  check_json_depth(text, path.string());
  TokenizerJson out;
  Reader reader(out, path.string());
  Json::sax_parse(text, &reader);
  return out;
}

}  // namespace ctune::tok
