// What the run's own collectives cost between two ranks of this machine, measured through Comm
// (Gloo over loopback TCP, with its copies, its threads and the local sum of a reduce-scatter):
// a fixed cost per call and a rate for the bytes beyond it. A raw socket's rate is about three
// times too optimistic for Gloo on a small machine (docs/planning.md, "The step-time model").
#pragma once

namespace ctune::distributed {

struct CollectiveCost {
  double seconds_per_call = 0;  // a call moving almost nothing (64 KB in all)
  double bytes_per_second = 0;  // per rank, of the ring volume: (N - 1)/N of the whole (twice for an all-reduce)
  // Seconds of one call that moves `ring_bytes` per rank.
  double seconds(double calls, double ring_bytes) const {
    return calls * seconds_per_call + (bytes_per_second > 0 ? ring_bytes / bytes_per_second : 0.0);
  }
};

struct CollectiveRates {
  CollectiveCost all_gather, reduce_scatter, all_reduce;
};

// Two ranks in this process (a thread each) over a private store: each collective at 64 KB and
// at 16 MB in all, the median of a few calls. A second or two. Throws DistributedError when the
// ranks cannot meet.
CollectiveRates measure_collective_rates();

}  // namespace ctune::distributed
