#include "train/state/sharded_checkpoint.h"

#include <ATen/core/grad_mode.h>
#include <cstdio>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "io/tensor_io.h"

namespace ctune::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "ctune-state-shard-1";
constexpr const char* kMetadataKey = "ctune";
const std::string kWeights = "weights/", kOptimizer = "optimizer/";

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string state_shard_file_name(int index, int count) {
  char name[64];
  std::snprintf(name, sizeof(name), "rank-%05d-of-%05d.safetensors", index, count);
  return name;
}

void write_state_shard(const fs::path& checkpoint, int index, int count, const StateShard& shard) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  Json slices = Json::object();
  auto add = [&](const std::string& prefix, const std::vector<TensorSlice>& list) {
    for (const auto& s : list) {
      TORCH_CHECK(s.data.dim() == 1 && s.offset >= 0 && s.offset + s.data.numel() <= numel_of(s.shape), "slice of ", s.name,
                  " outside its tensor");
      tensors.emplace_back(prefix + s.name, s.data);
      slices[prefix + s.name] = {{"shape", s.shape}, {"offset", s.offset}};
    }
  };
  add(kWeights, shard.weights);
  add(kOptimizer, shard.optimizer);
  const Json meta = {{"format", kFormat}, {"index", index}, {"count", count}, {"slices", slices}};
  std::error_code ec;
  fs::create_directories(checkpoint / kShardsDir, ec);
  std::vector<at::Tensor> keep;
  io::write_safetensors(checkpoint / kShardsDir / state_shard_file_name(index, count), io::describe_tensors(tensors, &keep),
                        {{kMetadataKey, meta.dump()}});
}

bool is_sharded_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir / kShardsDir, ec);
}

std::optional<std::pair<int, int>> parse_state_shard_file_name(const std::string& name) {
  static const std::regex pattern("rank-([0-9]{5})-of-([0-9]{5})\\.safetensors");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  return std::make_pair(std::stoi(m[1].str()), std::stoi(m[2].str()));
}

ShardedState::ShardedState(const fs::path& checkpoint) : dir_(checkpoint / kShardsDir) {
  std::map<int, fs::path> found;
  int count = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const auto parsed = parse_state_shard_file_name(e.path().filename().string());
    if (!parsed) throw FormatError(e.path().string() + ": not a shard file (expected rank-RRRRR-of-NNNNN.safetensors)");
    const int n = parsed->second;
    if (count >= 0 && n != count) throw FormatError(e.path().string() + ": a shard of " + std::to_string(n) + " beside shards of " + std::to_string(count));
    count = n;
    found[parsed->first] = e.path();
  }
  if (ec || count <= 0) throw FormatError(dir_.string() + ": no shard files");
  for (int i = 0; i < count; ++i) {
    if (!found.count(i)) throw FormatError(dir_.string() + ": " + state_shard_file_name(i, count) + " is missing");
  }
  if (static_cast<int>(found.size()) != count) throw FormatError(dir_.string() + ": more shard files than " + std::to_string(count));

  std::map<std::string, std::size_t> weight_index, optimizer_index;
  for (const auto& [i, path] : found) {
    files_.push_back(io::SafetensorsFile::open(path));
    const auto& file = *files_.back();
    const std::string where = path.string();
    const auto meta_text = file.header().metadata.find(kMetadataKey);
    if (meta_text == file.header().metadata.end()) throw FormatError(where + ": no \"ctune\" metadata (not a ctune state shard)");
    Json meta;
    try {
      meta = Json::parse(meta_text->second);
    } catch (const std::exception& e) {
      throw FormatError(where + ": unreadable \"ctune\" metadata (" + e.what() + ")");
    }
    if (!meta.is_object() || meta.value("format", "") != kFormat || !meta.contains("slices") || !meta["slices"].is_object()) {
      throw FormatError(where + ": expected \"ctune\" metadata of format " + kFormat);
    }
    for (const auto& t : file.header().tensors) {
      const auto it = meta["slices"].find(t.name);
      if (it == meta["slices"].end() || !it->contains("shape") || !it->contains("offset")) {
        throw FormatError(where + ": tensor \"" + t.name + "\" has no slice record");
      }
      std::vector<std::int64_t> shape;
      std::int64_t offset = 0;
      try {
        shape = (*it)["shape"].get<std::vector<std::int64_t>>();
        offset = (*it)["offset"].get<std::int64_t>();
      } catch (const std::exception&) {
        throw FormatError(where + ": tensor \"" + t.name + "\": slice record needs an integer list \"shape\" and an integer \"offset\"");
      }
      const bool weight = t.name.rfind(kWeights, 0) == 0;
      if (!weight && t.name.rfind(kOptimizer, 0) != 0) throw FormatError(where + ": unexpected tensor \"" + t.name + "\"");
      const auto elements = static_cast<std::int64_t>(t.numel());
      if (t.shape.size() != 1 || offset < 0 || offset + elements > numel_of(shape)) {
        throw FormatError(where + ": tensor \"" + t.name + "\": elements [" + std::to_string(offset) + ", " +
                          std::to_string(offset + elements) + ") outside a tensor of shape " + shape_text(shape));
      }
      auto& entries = weight ? weights_ : optimizer_;
      auto& index = weight ? weight_index : optimizer_index;
      const std::string name = t.name.substr((weight ? kWeights : kOptimizer).size());
      auto [at, fresh] = index.emplace(name, entries.size());
      if (fresh) entries.push_back({name, shape, {}});
      Entry& entry = entries[at->second];
      if (entry.shape != shape) {
        throw FormatError(where + ": \"" + name + "\" has shape " + shape_text(shape) + " here and " + shape_text(entry.shape) +
                          " in another shard");
      }
      entry.parts.push_back({&file, &t, offset});
    }
  }
  check_coverage(weights_);
  check_coverage(optimizer_);
}

// Every element of every tensor exactly once: the slices, sorted by offset, tile the tensor.
void ShardedState::check_coverage(const std::vector<Entry>& entries) const {
  for (const auto& e : entries) {
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (const auto& p : e.parts) ranges.emplace_back(p.offset, p.offset + static_cast<std::int64_t>(p.info->numel()));
    std::sort(ranges.begin(), ranges.end());
    std::int64_t next = 0;
    for (const auto& [begin, end] : ranges) {
      if (begin != next) {
        throw FormatError(dir_.string() + ": \"" + e.name + "\": elements from " + std::to_string(std::min(begin, next)) + " are " +
                          (begin > next ? "in no shard" : "in two shards"));
      }
      next = end;
    }
    if (next != numel_of(e.shape)) {
      throw FormatError(dir_.string() + ": \"" + e.name + "\": the shards hold " + std::to_string(next) + " of its " +
                        std::to_string(numel_of(e.shape)) + " elements");
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> ShardedState::assemble(const std::vector<Entry>& entries) const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& e : entries) {
    const auto dtype = io::to_scalar_type(e.parts.front().info->dtype, e.parts.front().file->path().string());
    at::Tensor whole = at::empty(e.shape, at::TensorOptions().dtype(dtype));
    at::Tensor flat = whole.view({-1});
    for (const auto& p : e.parts) {
      const at::Tensor data = io::load_tensor(*p.file, *p.info, dtype);
      flat.narrow(0, p.offset, data.numel()).copy_(data);
    }
    out.emplace_back(e.name, whole);
  }
  return out;
}

std::size_t ShardedState::load_weights_into(model::CausalLM& model) const {
  at::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> params;
  for (const auto& item : model->named_parameters(true)) params.emplace(item.key(), item.value());
  std::set<std::string> filled;
  for (const auto& e : weights_) {
    const auto it = params.find(e.name);
    if (it == params.end()) throw ShapeError(dir_.string() + ": \"" + e.name + "\" is not a parameter of the model being built");
    at::Tensor& p = it->second;
    if (!p.sizes().equals(e.shape)) {
      throw ShapeError(dir_.string() + ": \"" + e.name + "\" has shape " + shape_text(e.shape) + ", the model's parameter " +
                       shape_text(p.sizes().vec()));
    }
    at::Tensor flat = p.view({-1});
    for (const auto& part : e.parts) {
      const at::Tensor data = io::load_tensor(*part.file, *part.info, std::nullopt);
      flat.narrow(0, part.offset, data.numel()).copy_(data);
    }
    filled.insert(e.name);
  }
  for (const auto& [name, p] : params) {
    if (p.requires_grad() && !filled.count(name)) {
      throw ShapeError(dir_.string() + ": the trainable parameter \"" + name + "\" is in no shard (a checkpoint of another method?)");
    }
  }
  return filled.size();
}

}  // namespace ctune::train
