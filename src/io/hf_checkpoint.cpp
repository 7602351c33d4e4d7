#include "io/hf_checkpoint.h"

#include <cctype>
#include <set>

#include "core/error.h"
#include "core/json.h"

namespace ctune::io {
namespace fs = std::filesystem;

namespace {
// Index entries are file names relative to the checkpoint; anything that could resolve
// outside it (absolute, "..", empty) is refused before any file is opened.
void check_shard_name(const std::string& shard, const std::string& tensor, const fs::path& index) {
  fs::path p(shard);
  bool bad = shard.empty() || p.is_absolute() || shard.find('\0') != std::string::npos;
  for (const auto& part : p) bad = bad || part == ".." || part == "." || part.empty();
  if (bad) {
    throw FormatError(index.string() + ": weight_map entry for \"" + tensor + "\" points outside the checkpoint directory (\"" +
                      shard + "\"; expected a file name inside it)");
  }
}
}  // namespace

CheckpointReader::CheckpointReader(const fs::path& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(dir.string() + ": not a directory (expected a Hugging Face model directory)");
  const fs::path index_path = dir / kIndexFileName;
  const fs::path single_path = dir / kSingleFileName;

  if (fs::exists(index_path, ec)) {
    sharded_ = true;
    Json index = read_json_file(index_path);
    if (!index.is_object()) throw FormatError(index_path.string() + ": expected a JSON object, found " + json_type_name(index));
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      throw FormatError(index_path.string() + ": missing object \"weight_map\" (tensor name -> shard file)");
    }
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string()) {
        throw FormatError(index_path.string() + ": weight_map[\"" + it.key() + "\"] expected a file name string, found " +
                          json_type_name(*it));
      }
      check_shard_name(it->get<std::string>(), it.key(), index_path);
    }
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      const std::string shard = it->get<std::string>();
      auto found = shards.find(shard);
      if (found == shards.end()) {
        const fs::path shard_path = dir / shard;
        if (!fs::exists(shard_path, ec)) {
          throw IoError(index_path.string() + ": shard \"" + shard + "\" (holding \"" + it.key() + "\") is missing from " +
                        dir.string());
        }
        found = shards.emplace(shard, SafetensorsFile::open(shard_path)).first;
        files_.push_back(found->second);
      }
      const TensorInfo* info = found->second->header().find(it.key());
      if (!info) {
        throw FormatError(index_path.string() + ": tensor \"" + it.key() + "\" is listed in shard \"" + shard +
                          "\" but that file does not contain it");
      }
      tensors_[it.key()] = TensorRef{found->second.get(), info};
    }
    return;
  }
  if (fs::exists(single_path, ec)) {
    files_.push_back(SafetensorsFile::open(single_path));
    for (const auto& t : files_.back()->header().tensors) tensors_[t.name] = TensorRef{files_.back().get(), &t};
    return;
  }
  std::string hint;
  if (fs::exists(dir / "pytorch_model.bin", ec)) hint = " (pytorch_model.bin found: convert it to safetensors first)";
  if (hint.empty()) hint = sharded_checkpoint_hint(dir);
  throw IoError(dir.string() + ": no " + kSingleFileName + " or " + kIndexFileName + hint);
}

const TensorRef* CheckpointReader::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::uint64_t parse_byte_size(const std::string& text, const std::string& where) {
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string digits = text.substr(0, i), unit = text.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, std::uint64_t> units = {
      {"", 1},          {"B", 1},          {"KB", 1000ull},        {"MB", 1000ull * 1000},
      {"GB", 1000ull * 1000 * 1000},        {"KIB", 1ull << 10},    {"MIB", 1ull << 20},
      {"GIB", 1ull << 30}};
  auto u = units.find(unit);
  if (digits.empty() || digits.size() > 12 || u == units.end() || std::stoull(digits) == 0) {
    throw ConfigError(where + ": expected a positive size like 5GB, 500MB, 2GiB or a byte count, found \"" + text + "\"");
  }
  return std::stoull(digits) * u->second;
}

std::vector<std::size_t> plan_shards(const std::vector<std::uint64_t>& sizes, std::uint64_t max_bytes,
                                     std::size_t* shard_count) {
  std::vector<std::size_t> shard_of(sizes.size());
  std::size_t shard = 0;
  std::uint64_t used = 0;
  bool open = false;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (open && used + sizes[i] > max_bytes) {
      ++shard;
      used = 0;
    }
    shard_of[i] = shard;
    used += sizes[i];
    open = true;
  }
  *shard_count = sizes.empty() ? 1 : shard + 1;
  return shard_of;
}

std::string shard_file_name(std::size_t index, std::size_t count) {
  if (count == 1) return kSingleFileName;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

void write_checkpoint_tensors(const fs::path& dir, const std::vector<TensorBytes>& tensors, std::uint64_t max_shard_bytes) {
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (const auto& t : tensors) {
    sizes.push_back(t.nbytes);
    total += t.nbytes;
  }
  std::size_t count = 1;
  auto shard_of = plan_shards(sizes, max_shard_bytes, &count);
  std::vector<std::vector<TensorBytes>> shards(count);
  Json weight_map = Json::object();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    shards[shard_of[i]].push_back(tensors[i]);
    weight_map[tensors[i].name] = shard_file_name(shard_of[i], count);
  }
  for (std::size_t s = 0; s < count; ++s) write_safetensors(dir / shard_file_name(s, count), shards[s]);
  if (count > 1) {
    Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic(dir / kIndexFileName, index.dump(2) + "\n");
  }
}

}  // namespace ctune::io

namespace ctune::io {

std::string sharded_checkpoint_hint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir / kStateShardsDir, ec)) return "";
  return " (a sharded checkpoint, one file per rank: make it whole with `ctune consolidate " + dir.string() + " --out DIR`)";
}

bool has_tokenizer_files(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "tokenizer.json", ec) || fs::exists(dir / "tokenizer.model", ec);
}

namespace {
const char* const kTokenizerFiles[] = {"tokenizer.json",          "tokenizer.model",        "tokenizer_config.json",
                                       "special_tokens_map.json", "generation_config.json", "chat_template.jinja"};
}  // namespace

std::int64_t tokenizer_files_bytes(const fs::path& source) {
  std::int64_t bytes = 0;
  for (const char* name : kTokenizerFiles) {
    std::error_code ec;
    const auto size = fs::file_size(source / name, ec);
    if (!ec) bytes += static_cast<std::int64_t>(size);
  }
  return bytes;
}

void copy_tokenizer_files(const fs::path& source, const fs::path& dest) {
  bool any = false;
  for (const char* name : kTokenizerFiles) {
    std::error_code ec;
    if (!fs::exists(source / name, ec)) continue;
    fs::copy_file(source / name, dest / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw IoError((source / name).string() + ": cannot copy (" + ec.message() + ")");
    any = any || std::string(name) == "tokenizer.json" || std::string(name) == "tokenizer.model";
  }
  if (!any) throw IoError(source.string() + ": no tokenizer.json or tokenizer.model found");
}

}  // namespace ctune::io
