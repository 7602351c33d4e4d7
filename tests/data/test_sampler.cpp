// The training sampler: the epoch order is a fixed function of (seed, epoch) (hard-coded here,
// so a change of algorithm or of the standard library shows up), a restored cursor reproduces
// the rest of the stream exactly, the state survives a JSON round trip and is refused when the
// data or batching changed, and epochs roll over after their last (possibly partial) batch.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "data/sampler.h"
#include "data/shuffle.h"

namespace ctune::data {
namespace {

Examples make_examples(std::size_t n) {
  auto v = std::make_shared<std::vector<Example>>();
  for (std::size_t k = 0; k < n; ++k) {
    Example e;
    const std::size_t len = 2 + (k * 7) % 11;
    for (std::size_t t = 0; t < len; ++t) {
      e.ids.push_back(static_cast<std::int32_t>(k * 100 + t));
      e.labels.push_back(t == 0 ? kIgnoreIndex : static_cast<std::int32_t>(k * 100 + t));
    }
    e.record = static_cast<std::int64_t>(k);
    v->push_back(std::move(e));
  }
  return v;
}

SamplerOptions options(bool packing, std::int64_t batch_size = 3) {
  SamplerOptions o;
  o.batch = BatchOptions{batch_size, 24, packing, 0};
  o.seed = 42;
  return o;
}

enum class Packing { none, in_order, bin_packed, split };

SamplerOptions options(Packing mode) {
  SamplerOptions o = options(mode != Packing::none);
  o.batch.packing_window = mode == Packing::bin_packed ? 5 : 0;
  o.batch.packing_split = mode == Packing::split;
  return o;
}

void expect_same(const Batch& a, const Batch& b, const std::string& where) {
  EXPECT_EQ(a.rows, b.rows) << where;
  EXPECT_EQ(a.length, b.length) << where;
  EXPECT_EQ(a.input_ids, b.input_ids) << where;
  EXPECT_EQ(a.labels, b.labels) << where;
  EXPECT_EQ(a.position_ids, b.position_ids) << where;
  EXPECT_EQ(a.segment_ids, b.segment_ids) << where;
}

TEST(Shuffle, GeneratorIsTheStandardOne) {
  // [rand.predef]: the 10000th output of a default-constructed mt19937_64.
  std::mt19937_64 gen;
  gen.discard(9999);
  EXPECT_EQ(gen(), 9981545732273789042ull);
}

TEST(Shuffle, FixedOrdersForAFixedSeed) {
  // Produced by shuffle_reference.py, an independent implementation in Python.
  EXPECT_EQ(permutation(10, 1234, Stream::epoch_order, 0), (std::vector<std::int64_t>{6, 2, 0, 3, 9, 5, 4, 1, 8, 7}));
  EXPECT_EQ(permutation(10, 1234, Stream::epoch_order, 1), (std::vector<std::int64_t>{0, 4, 6, 2, 5, 9, 1, 3, 7, 8}));
  EXPECT_EQ(permutation(10, 1234, Stream::eval_split, 0), (std::vector<std::int64_t>{9, 3, 7, 1, 8, 5, 2, 6, 0, 4}));
  EXPECT_EQ(derive_seed(0, Stream::epoch_order, 0), 4964578127960768432ull);
  const Sampler s(make_examples(8), options(false));  // seed 42
  EXPECT_EQ(s.epoch_order(0), (std::vector<std::int64_t>{5, 1, 7, 2, 3, 6, 0, 4}));
  EXPECT_EQ(s.epoch_order(1), (std::vector<std::int64_t>{4, 5, 1, 6, 3, 2, 7, 0}));
}

TEST(Shuffle, UniformBelowCoversTheRange) {
  std::mt19937_64 gen(7);
  std::vector<int> seen(5, 0);
  for (int k = 0; k < 1000; ++k) ++seen[uniform_below(gen, 5)];
  for (int c : seen) EXPECT_GT(c, 150);
  EXPECT_EQ(uniform_below(gen, 1), 0u);
}

TEST(Sampler, EpochsRollOverAndKeepThePartialBatch) {
  Sampler s(make_examples(10), options(false));
  EXPECT_EQ(s.batches_per_epoch(), 4);  // 3 + 3 + 3 + 1
  std::vector<std::int64_t> seen;
  for (int b = 0; b < 4; ++b) {
    EXPECT_EQ(s.epoch(), 0);
    EXPECT_EQ(s.position(), b);
    const Batch batch = s.next();
    EXPECT_EQ(batch.rows, b < 3 ? 3 : 1);
    for (std::int64_t r = 0; r < batch.rows; ++r) seen.push_back(batch.input_ids[static_cast<std::size_t>(r * batch.length)] / 100);
  }
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_EQ(s.position(), 0);
  EXPECT_EQ(seen, s.epoch_order(0));
  SamplerOptions fixed = options(false);
  fixed.shuffle = false;
  EXPECT_EQ(Sampler(make_examples(4), fixed).epoch_order(3), (std::vector<std::int64_t>{0, 1, 2, 3}));
}

std::string packing_name(Packing mode) {
  switch (mode) {
    case Packing::none: return "unpacked";
    case Packing::in_order: return "packed";
    case Packing::bin_packed: return "bin_packed";
    default: return "split";
  }
}

class SamplerResume : public ::testing::TestWithParam<Packing> {};

TEST_P(SamplerResume, RestoredCursorReproducesTheStream) {
  const auto examples = make_examples(23);
  Sampler a(examples, options(GetParam()));
  const std::int64_t total = a.batches_in_epoch(0) + a.batches_in_epoch(1) + a.batches_in_epoch(2);
  for (std::int64_t stop : {std::int64_t{0}, std::int64_t{2}, a.batches_in_epoch(0), a.batches_in_epoch(0) + 1}) {
    Sampler full(examples, options(GetParam()));
    Sampler first(examples, options(GetParam()));
    for (std::int64_t k = 0; k < stop; ++k) {
      full.next();
      first.next();
    }
    // Through JSON, as a checkpoint would store it.
    const SamplerState saved = SamplerState::from_json(Json::parse(first.state().to_json().dump()), "state.json");
    Sampler resumed(examples, options(GetParam()));
    resumed.restore(saved);
    EXPECT_EQ(resumed.epoch(), full.epoch());
    EXPECT_EQ(resumed.position(), full.position());
    for (std::int64_t k = stop; k < total; ++k)
      expect_same(resumed.next(), full.next(), "batch " + std::to_string(k) + " after resuming at " + std::to_string(stop));
  }
}

INSTANTIATE_TEST_SUITE_P(PackedAndUnpacked, SamplerResume,
                         ::testing::Values(Packing::none, Packing::in_order, Packing::bin_packed, Packing::split),
                         [](const auto& info) { return packing_name(info.param); });

TEST(Sampler, RestoreRefusesAnotherSetup) {
  const auto examples = make_examples(12);
  Sampler s(examples, options(false));
  s.next();
  const SamplerState state = s.state();
  EXPECT_THROW(Sampler(examples, options(false, 4)).restore(state), ConfigError);
  EXPECT_THROW(Sampler(examples, options(true)).restore(state), ConfigError);
  Sampler packed(examples, options(Packing::bin_packed));
  const SamplerState packed_state = packed.state();
  EXPECT_THROW(Sampler(examples, options(Packing::in_order)).restore(packed_state), ConfigError);
  Json old = packed_state.to_json();  // a checkpoint from before bin-packing: packed in order
  old.erase("packing_window");
  old.erase("packing_split");
  EXPECT_NO_THROW(Sampler(examples, options(Packing::in_order)).restore(SamplerState::from_json(old, "state.json")));
  EXPECT_THROW(Sampler(examples, options(Packing::bin_packed)).restore(SamplerState::from_json(old, "state.json")),
               ConfigError);
  SamplerOptions other_seed = options(false);
  other_seed.seed = 43;
  EXPECT_THROW(Sampler(examples, other_seed).restore(state), ConfigError);
  EXPECT_THROW(Sampler(make_examples(13), options(false)).restore(state), ConfigError);
  auto changed = std::make_shared<std::vector<Example>>(*examples);
  (*changed)[5].ids[1] += 1;
  EXPECT_THROW(Sampler(changed, options(false)).restore(state), ConfigError);
  SamplerState past = state;
  past.position = 99;
  EXPECT_THROW(Sampler(examples, options(false)).restore(past), ConfigError);
  Json bad = state.to_json();
  bad.erase("seed");
  EXPECT_THROW(SamplerState::from_json(bad, "state.json"), FormatError);
  bad = state.to_json();
  bad["fingerprint"] = "xyz";
  EXPECT_THROW(SamplerState::from_json(bad, "state.json"), FormatError);
}

}  // namespace
}  // namespace ctune::data
