// The resumable training sampler; see sampler.h.
#include "data/sampler.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "core/error.h"
#include "data/shuffle.h"

namespace ctune::data {

BatchOptions batch_options(const DataOptions& options, const tok::Tokenizer& tokenizer) {
  BatchOptions b;
  b.batch_size = options.batch_size;
  b.max_seq_len = options.max_seq_len;
  b.packing = options.packing;
  b.packing_window = options.packing_window;
  b.pad_id = tokenizer.special().pad.value_or(0);
  b.rows_per_group = examples_per_record(options.format);
  return b;
}

SamplerOptions sampler_options(const DataOptions& options, const tok::Tokenizer& tokenizer) {
  SamplerOptions s;
  s.batch = batch_options(options, tokenizer);
  s.batch.packing_split = options.packing && options.packing_split;
  s.shuffle = options.shuffle;
  s.seed = options.seed;
  return s;
}

std::uint64_t fingerprint(const std::vector<Example>& examples) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  auto mix = [&h](std::uint64_t v) {
    for (int k = 0; k < 8; ++k) {
      h ^= (v >> (8 * k)) & 0xFF;
      h *= 0x100000001B3ull;
    }
  };
  mix(examples.size());
  for (const Example& e : examples) {
    mix(e.ids.size());
    for (std::int32_t id : e.ids) mix(static_cast<std::uint32_t>(id));
    for (std::int32_t l : e.labels) mix(static_cast<std::uint32_t>(l));
    if (e.desirable >= 0) mix(static_cast<std::uint64_t>(e.desirable) + 0x100);  // unpaired records' labels (none elsewhere: unchanged)
  }
  return h;
}

Sampler::Sampler(Examples examples, const SamplerOptions& options)
    : examples_(std::move(examples)), options_(options) {
  if (!examples_ || examples_->empty()) throw ConfigError("sampler: no training examples");
  fingerprint_ = fingerprint(*examples_);
  start_epoch(0);
}

std::vector<std::int64_t> Sampler::epoch_order(std::int64_t epoch) const {
  const auto n = static_cast<std::int64_t>(examples_->size());
  const std::int64_t g = options_.batch.rows_per_group;
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!options_.shuffle) return order;
  if (g == 1) return permutation(n, options_.seed, Stream::epoch_order, static_cast<std::uint64_t>(epoch));
  // Groups (preference pairs) are shuffled as units; their rows stay together and in order.
  const auto groups = permutation(n / g, options_.seed, Stream::epoch_order, static_cast<std::uint64_t>(epoch));
  for (std::size_t k = 0; k < groups.size(); ++k)
    for (std::int64_t j = 0; j < g; ++j) order[k * static_cast<std::size_t>(g) + static_cast<std::size_t>(j)] = groups[k] * g + j;
  return order;
}

std::int64_t Sampler::batches_in_epoch(std::int64_t epoch) const {
  if (epoch == epoch_) return plan_.size();
  return BatchPlan(*examples_, epoch_order(epoch), options_.batch).size();
}

void Sampler::start_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  position_ = 0;
  plan_ = BatchPlan(*examples_, epoch_order(epoch), options_.batch);
}

Batch Sampler::next() {
  Batch b = plan_.batch(position_);
  if (++position_ == plan_.size()) start_epoch(epoch_ + 1);
  return b;
}

SamplerState Sampler::state() const {
  SamplerState s;
  s.epoch = epoch_;
  s.position = position_;
  s.seed = options_.seed;
  s.shuffle = options_.shuffle;
  s.packing = options_.batch.packing;
  s.packing_window = options_.batch.packing_window;
  s.packing_split = options_.batch.packing_split;
  s.batch_size = options_.batch.batch_size;
  s.rows_per_group = options_.batch.rows_per_group;
  s.max_seq_len = options_.batch.max_seq_len;
  s.num_examples = static_cast<std::int64_t>(examples_->size());
  s.fingerprint = fingerprint_;
  return s;
}

void Sampler::restore(const SamplerState& s) {
  const SamplerState now = state();
  auto check = [](bool same, const std::string& what, const std::string& saved, const std::string& current) {
    if (!same)
      throw ConfigError("data cursor: the checkpoint was saved with " + what + " " + saved + ", the run has " + current +
                        " (resume with the same data and batching settings)");
  };
  check(s.num_examples == now.num_examples, "training examples", std::to_string(s.num_examples),
        std::to_string(now.num_examples));
  check(s.fingerprint == now.fingerprint, "dataset fingerprint", "another", "different examples");
  check(s.seed == now.seed, "seed", std::to_string(s.seed), std::to_string(now.seed));
  check(s.shuffle == now.shuffle, "data.shuffle", s.shuffle ? "true" : "false", now.shuffle ? "true" : "false");
  check(s.packing == now.packing, "data.packing", s.packing ? "true" : "false", now.packing ? "true" : "false");
  check(!now.packing || s.packing_window == now.packing_window, "data.packing_window", std::to_string(s.packing_window),
        std::to_string(now.packing_window));
  check(!now.packing || s.packing_split == now.packing_split, "data.packing_split", s.packing_split ? "true" : "false",
        now.packing_split ? "true" : "false");
  check(s.rows_per_group == now.rows_per_group, "rows per group (data.format preference: 2)", std::to_string(s.rows_per_group),
        std::to_string(now.rows_per_group));
  check(s.batch_size == now.batch_size, "batch_size", std::to_string(s.batch_size), std::to_string(now.batch_size));
  check(!now.packing || s.max_seq_len == now.max_seq_len, "data.max_seq_len", std::to_string(s.max_seq_len),
        std::to_string(now.max_seq_len));
  if (s.epoch < 0 || s.position < 0)
    throw ConfigError("data cursor: negative epoch or position (" + std::to_string(s.epoch) + ", " +
                      std::to_string(s.position) + ")");
  start_epoch(s.epoch);
  if (s.position > plan_.size())
    throw ConfigError("data cursor: position " + std::to_string(s.position) + " is past the " +
                      std::to_string(plan_.size()) + " batches of epoch " + std::to_string(s.epoch));
  position_ = s.position;
  if (position_ == plan_.size()) start_epoch(epoch_ + 1);
}

Json SamplerState::to_json() const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fingerprint));
  return Json{{"epoch", epoch},       {"position", position},       {"seed", seed},
              {"shuffle", shuffle},   {"packing", packing},         {"packing_window", packing_window},
              {"packing_split", packing_split}, {"batch_size", batch_size}, {"rows_per_group", rows_per_group},
              {"max_seq_len", max_seq_len}, {"num_examples", num_examples}, {"fingerprint", hex}};
}

SamplerState SamplerState::from_json(const Json& json, const std::string& where) {
  if (!json.is_object()) throw FormatError(where + ": data cursor: expected an object, found " + json_type_name(json));
  auto need_int = [&](const char* key) {
    auto v = json_int(json, key, where);
    if (!v) throw FormatError(where + ": data cursor: missing key \"" + key + "\"");
    return *v;
  };
  auto need_bool = [&](const char* key) {
    auto v = json_bool(json, key, where);
    if (!v) throw FormatError(where + ": data cursor: missing key \"" + key + "\"");
    return *v;
  };
  SamplerState s;
  s.epoch = need_int("epoch");
  s.position = need_int("position");
  auto seed = json.find("seed");
  if (seed == json.end() || !seed->is_number_integer() || (!seed->is_number_unsigned() && seed->get<std::int64_t>() < 0))
    throw FormatError(where + ": data cursor: key \"seed\" expected a non-negative integer");
  s.seed = seed->get<std::uint64_t>();
  s.shuffle = need_bool("shuffle");
  s.packing = need_bool("packing");
  s.packing_window = json_int(json, "packing_window", where).value_or(0);
  s.packing_split = json_bool(json, "packing_split", where).value_or(false);
  s.batch_size = need_int("batch_size");
  s.rows_per_group = json_int(json, "rows_per_group", where).value_or(1);  // absent before preference data: 1
  s.max_seq_len = need_int("max_seq_len");
  s.num_examples = need_int("num_examples");
  auto fp = json_string(json, "fingerprint", where);
  char* end = nullptr;
  if (!fp || fp->size() != 16 || (s.fingerprint = std::strtoull(fp->c_str(), &end, 16), end != fp->c_str() + 16))
    throw FormatError(where + ": data cursor: key \"fingerprint\" expected 16 hex digits");
  return s;
}

}  // namespace ctune::data
