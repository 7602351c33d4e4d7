// The ranks of a run talking to each other: collectives over a c10d process group (Gloo over
// TCP on CPU builds), joined through a TCPStore rendezvous. A world of one process is the same
// object with nothing to talk to: every collective returns its input, so callers need no
// "if distributed" of their own.
//
// Failures never hang: a collective gives up once a rank has not answered for the timeout
// (distributed.timeout_s), and throws DistributedError naming the rank(s) that died or stopped
// answering. Each rank beats a counter in the store once a second from a thread of its own;
// after a failure the ranks whose counter stands still are the ones named (docs/distributed.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "core/error.h"
#include "distributed/world.h"

namespace ctune::distributed {

// A collective failed: a rank died, stopped answering, or the rendezvous did not complete.
class DistributedError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "distributed error"; }
};

class Comm {
 public:
  // A world of one process.
  Comm();
  // Joins `world`'s process group: connects to (or, on rank 0 without an agent store, hosts)
  // the store at master_addr:master_port and meets every other rank there within `timeout`.
  Comm(const World& world, std::chrono::milliseconds timeout);
  // Leaving: after a successful run the rank hosting the store waits (up to the timeout) until
  // every rank has left, so none loses the store while finishing; while an exception unwinds,
  // the rank tells the others it failed, so they stop at once instead of waiting out the timeout.
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // The ranks `members` (of this group, in order, this one among them) as a group of their own,
  // for collectives among them only (hybrid_shard's node and replica groups). Every member
  // calls it with the same `name` at the same point of the run. Its failures name world ranks.
  std::unique_ptr<Comm> subgroup(const std::string& name, const std::vector<int>& members) const;

  // Of a subgroup: rank() and size() within it.
  const World& world() const { return world_; }
  // Seconds this rank has spent inside collectives and barriers (waiting for the others and
  // moving bytes): the communication share of a step.
  double seconds_communicating() const { return *seconds_; }
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }

  // In place: the element-wise sum over all ranks (any dtype Gloo reduces: float, double, int).
  void all_reduce_sum(at::Tensor& tensor, const char* what);
  // In place: element-wise maximum over all ranks.
  void all_reduce_max(at::Tensor& tensor, const char* what);
  // `input` holds n equal chunks (n = ranks); returns the sum over ranks of chunk `rank()`.
  // LibTorch 1.13's Gloo has no reduce_scatter: all-to-all then a local sum, which moves the
  // same bytes as a ring reduce-scatter (docs/build.md).
  at::Tensor reduce_scatter_sum(const at::Tensor& input, const char* what);
  // Uneven: `input` is n consecutive parts of `splits[r]` elements (the same splits on every
  // rank); returns the sum over ranks of part `rank()` (splits[rank()] elements, maybe none).
  at::Tensor reduce_scatter_sum(const at::Tensor& input, const std::vector<std::int64_t>& splits, const char* what);
  // Every rank's `chunk`, in rank order, into `output` (n x chunk elements).
  void all_gather(const at::Tensor& chunk, at::Tensor& output, const char* what);
  // The same, started now and finished by wait(), so computation can go on meanwhile (full_shard
  // gathers the next block while this one computes). `output` must stay alive until then.
  class Pending {
   public:
    Pending() = default;
    bool active() const { return comm_ != nullptr; }
    void wait();  // timed and failure-naming like the blocking collectives

   private:
    friend class Comm;
    Comm* comm_ = nullptr;
    const char* what_ = "";
    c10::intrusive_ptr<c10d::Work> work_;
    std::vector<at::Tensor> keep_;  // the chunk sent, while it travels
  };
  Pending all_gather_async(const at::Tensor& chunk, at::Tensor& output, const char* what);
  // Returns when every rank has called it. Waits as long as the missing ranks are alive (a
  // rank writing a large checkpoint keeps the others here); fails once one of them has not
  // answered for the timeout.
  void barrier(const char* what);

 private:
  struct Group;
  [[noreturn]] void fail(const char* what, const std::string& cause);
  std::vector<std::int64_t> heartbeats() const;
  // Throws DistributedError when a rank announced that it failed (its exception unwinding).
  void throw_if_a_rank_failed(const char* what) const;
  template <typename F>
  void run(const char* what, F&& collective);  // F(c10d::ProcessGroupGloo&); in comm.cpp
  enum class Reduce { sum, max };
  void all_reduce(at::Tensor& tensor, Reduce op, const char* what);

  int world_rank(int r) const { return members_.empty() ? r : members_[static_cast<std::size_t>(r)]; }

  World world_;
  std::vector<int> members_;  // a subgroup's world ranks; empty: the whole world
  std::string keys_;          // prefix of this group's barrier keys in the store
  std::chrono::milliseconds timeout_{0};
  std::unique_ptr<Group> group_;  // null in a world of one
  std::int64_t barriers_ = 0;
  std::shared_ptr<double> seconds_ = std::make_shared<double>(0.0);  // shared with subgroups
  std::shared_ptr<bool> stranger_reported_ = std::make_shared<bool>(false);  // a foreign "failed" value, once
};

}  // namespace ctune::distributed
