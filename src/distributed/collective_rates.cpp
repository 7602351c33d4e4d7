#include "distributed/collective_rates.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "distributed/comm.h"
#include "distributed/local_store.h"

namespace ctune::distributed {

namespace {

constexpr int kRanks = 2;
constexpr int kReps = 7;

// One rank's side: joins, then for each collective and size runs it once untimed and kReps
// times timed (each after a barrier, so both ranks start together). The cost per call is the
// small size's median; the rate, the extra bytes of the large size over its extra seconds.
// Rank 0's figures go to `out`.
void rank_side(const World& world, CollectiveRates* out) {
  Comm comm(world, std::chrono::seconds(60));
  CollectiveRates rates;
  const double ring = static_cast<double>(kRanks - 1) / kRanks;
  const std::int64_t sizes[2] = {16 << 10, 4 << 20};  // fp32 elements in all: 64 KB and 16 MB
  // The median seconds of `run` on tensors made once per size by `make` (not timed).
  auto time = [&](CollectiveCost& cost, double volume, const std::function<std::function<void()>(std::int64_t)>& make) {
    double seconds[2] = {0, 0};
    for (int s = 0; s < 2; ++s) {
      const auto run = make(sizes[s]);
      run();
      std::vector<double> t;
      for (int i = 0; i < kReps; ++i) {
        comm.barrier("measuring collectives");
        const auto start = std::chrono::steady_clock::now();
        run();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(t.begin(), t.end());
      seconds[s] = t[t.size() / 2];
    }
    cost.seconds_per_call = seconds[0];
    cost.bytes_per_second = volume * 4.0 * static_cast<double>(sizes[1] - sizes[0]) / std::max(seconds[1] - seconds[0], 1e-9);
  };
  time(rates.all_gather, ring, [&](std::int64_t whole) {
    return [&comm, chunk = at::ones({whole / kRanks}), output = at::empty({whole})]() mutable {
      comm.all_gather(chunk, output, "measuring all-gather");
    };
  });
  time(rates.reduce_scatter, ring, [&](std::int64_t whole) {
    return [&comm, input = at::ones({whole})] { (void)comm.reduce_scatter_sum(input, "measuring reduce-scatter"); };
  });
  time(rates.all_reduce, 2.0 * ring, [&](std::int64_t whole) {
    return [&comm, t = at::zeros({whole})]() mutable { comm.all_reduce_sum(t, "measuring all-reduce"); };
  });
  comm.barrier("measuring collectives");
  if (out != nullptr) *out = rates;
}

}  // namespace

CollectiveRates measure_collective_rates() {
  const StoreServer store;
  CollectiveRates rates;
  std::vector<std::exception_ptr> errors(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      World world;
      world.rank = r;
      world.size = world.local_size = kRanks;
      world.local_rank = r;
      world.agent_store = true;
      world.store_prefix = "measure/";
      world.store_socket = store.socket_path();
      world.store_secret = store.secret();
      world.source = "measuring this machine's collectives";
      try {
        rank_side(world, r == 0 ? &rates : nullptr);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return rates;
}

}  // namespace ctune::distributed
