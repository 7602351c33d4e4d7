#include "distributed/comm.h"

#include <cstdlib>

#include <atomic>
#include <condition_variable>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include <ATen/record_function.h>
#include <spdlog/spdlog.h>

#include "distributed/local_store.h"
#include "ops/profile_regions.h"

namespace ctune::distributed {

namespace {

std::string heartbeat_key(int rank) { return "heartbeat/" + std::to_string(rank); }

// How long fail() watches the heartbeats to tell a dead rank from a live one.
constexpr std::chrono::milliseconds kProbe{3500};

// Gloo's transport: the interface named by GLOO_SOCKET_IFNAME (as PyTorch reads it), the
// loopback address for a run on one machine, else this host's address.
std::shared_ptr<::gloo::transport::Device> gloo_device(const World& world) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  // Every rank is on this machine when there is one node or the master is a loopback address
  // (nodes simulated on one machine).
  const bool loopback = world.master_addr == "localhost" || world.master_addr.rfind("127.", 0) == 0;
  if (world.nodes() == 1 || loopback) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Adds the lifetime of the guard to a running total.
class Stopwatch {
 public:
  explicit Stopwatch(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

struct Comm::Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  std::thread heartbeat;
  std::mutex mutex;
  std::condition_variable stop_cv;
  bool stopping = false;

  ~Group() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    stop_cv.notify_all();
    if (heartbeat.joinable()) heartbeat.join();
  }

  void beat(const std::string& key) {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop_cv.wait_for(lock, std::chrono::seconds(1), [this] { return stopping; })) {
      try {
        store->add(key, 1);
      } catch (const std::exception&) {
        return;  // the store is gone: the collectives will say so
      }
    }
  }

};

Comm::Comm() = default;

Comm::Comm(const World& world, std::chrono::milliseconds timeout) : world_(world), timeout_(timeout) {
  if (!world.distributed()) return;
  group_ = std::make_unique<Group>();
  try {
    c10::intrusive_ptr<c10d::Store> store;
    if (!world.store_socket.empty()) {
      store = connect_local_store(world.store_socket, world.store_secret, timeout);
    } else {
      c10d::TCPStoreOptions options;
      options.port = static_cast<std::uint16_t>(world.master_port);
      options.isServer = world.rank == 0 && !world.agent_store;
      options.numWorkers = world.agent_store ? c10::nullopt : c10::optional<std::size_t>(world.size);
      options.waitWorkers = false;
      options.timeout = timeout;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
      // From 2.4 a TCPStore serves through libuv unless told otherwise, and LibTorch builds
      // without libuv (Debian's) then refuse to start: the classic server, as 1.13 has (docs/build.md).
      options.useLibUV = false;
#endif
      store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, options);
      if (world.rank == 0 && !world.keys_secret) {
        spdlog::warn("distributed: CTUNE_RUN_SECRET is not set: any host that reaches {}:{} can disturb this run's keys "
                     "(docs/distributed.md, trust model)", world.master_addr, world.master_port);
      }
    }
    group_->store = c10::make_intrusive<c10d::PrefixStore>(world.store_prefix, store);
    // The probe after a failure counts against the timeout too.
    auto pg_options = c10d::ProcessGroupGloo::Options::create(std::max(std::chrono::milliseconds(1000), timeout - kProbe));
    pg_options->devices.push_back(gloo_device(world));
    pg_options->threads = 2;
    group_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(group_->store, world.rank, world.size, pg_options);
  } catch (const std::exception& e) {
    const std::string where = world.store_socket.empty() ? world.master_addr + ":" + std::to_string(world.master_port) : world.store_socket;
    throw DistributedError("rank " + std::to_string(world.rank) + " of " + std::to_string(world.size) + ": cannot join the run at " +
                           where + " within " +
                           std::to_string(timeout.count() / 1000) + " s (" + world.source + "): " + e.what());
  }
  group_->heartbeat = std::thread([g = group_.get(), key = heartbeat_key(world.rank)] { g->beat(key); });
  // Once at joining, whatever the timing of later barriers: a rank that failed already, or a
  // "failed" value no rank wrote (reported once, then ignored).
  throw_if_a_rank_failed("joining the run");
}

std::unique_ptr<Comm> Comm::subgroup(const std::string& name, const std::vector<int>& members) const {
  auto sub = std::make_unique<Comm>();
  sub->timeout_ = timeout_;
  sub->seconds_ = seconds_;  // time in the subgroups counts as this rank's communication
  sub->stranger_reported_ = stranger_reported_;
  sub->world_ = world_;
  sub->world_.size = static_cast<int>(members.size());
  sub->world_.rank = -1;
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank()) sub->world_.rank = static_cast<int>(i);
  TORCH_CHECK(sub->world_.rank >= 0, "subgroup ", name, ": rank ", rank(), " is not a member");
  for (int m : members) sub->members_.push_back(world_rank(m));
  sub->keys_ = keys_ + "group/" + name + "/";
  if (members.size() < 2 || !group_) return sub;  // a group of one: nothing to talk to
  sub->group_ = std::make_unique<Group>();
  sub->group_->store = group_->store;
  try {
    auto pg_options = c10d::ProcessGroupGloo::Options::create(std::max(std::chrono::milliseconds(1000), timeout_ - kProbe));
    pg_options->devices.push_back(gloo_device(world_));
    pg_options->threads = 2;
    sub->group_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(sub->keys_, group_->store),
                                                                 sub->world_.rank, sub->world_.size, pg_options);
  } catch (const std::exception& e) {
    throw DistributedError("rank " + std::to_string(world_rank(rank())) + ": cannot form the process group " + name + ": " + e.what());
  }
  return sub;
}

Comm::~Comm() {
  if (!group_ || !members_.empty()) return;  // a subgroup: its world says goodbye
  using Clock = std::chrono::steady_clock;
  try {
    if (std::uncaught_exceptions() > 0) {
      const std::string me = std::to_string(rank());
      group_->store->set("failed", std::vector<std::uint8_t>(me.begin(), me.end()));
      const bool hosts_store = rank() == 0 && !world_.agent_store;
      if (hosts_store) std::this_thread::sleep_for(std::chrono::seconds(1));  // time to read it
      return;
    }
    group_->store->add("left", 1);
    if (rank() != 0 || world_.agent_store) return;
    for (const auto deadline = Clock::now() + timeout_; group_->store->add("left", 0) < size() && Clock::now() < deadline;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception&) {
    // The store is gone: nobody is left to tell.
  }
}

// A rank that fails writes its world rank, in decimal, as "failed". Anything else there was
// written by a process outside the run: it is reported once and changes nothing.
void Comm::throw_if_a_rank_failed(const char* what) const {
  if (!group_->store->check({"failed"})) return;
  const auto value = group_->store->get("failed");
  // At most 7 decimal digits, and not this rank (it would not be here).
  const std::string text(value.begin(), value.end());
  const bool digits = !text.empty() && text.size() <= 7 && text.find_first_not_of("0123456789") == std::string::npos;
  const long failed = digits ? std::stol(text) : -1;
  const bool ours = digits && failed != world_rank(rank());
  if (!ours) {
    if (!*stranger_reported_) {
      *stranger_reported_ = true;
      spdlog::warn("distributed: the store's \"failed\" key holds {} bytes that no rank of this run wrote; ignored "
                   "(another process is writing to the run's store: docs/distributed.md, trust model)", value.size());
    }
    return;
  }
  throw DistributedError("rank " + std::to_string(world_rank(rank())) + ": " + what + " failed: rank " + std::to_string(failed) +
                         " stopped with an error (see its output)");
}

std::vector<std::int64_t> Comm::heartbeats() const {
  std::vector<std::int64_t> beats(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) beats[static_cast<std::size_t>(r)] = group_->store->add(heartbeat_key(world_rank(r)), 0);
  return beats;
}

// Names the ranks that stopped beating over the next few seconds; they died or hang.
void Comm::fail(const char* what, const std::string& cause) {
  std::string who;
  try {
    throw_if_a_rank_failed(what);
    const auto before = heartbeats();
    std::this_thread::sleep_for(kProbe);
    const auto after = heartbeats();
    for (int r = 0; r < size(); ++r) {
      if (r != rank() && after[r] == before[r]) who += (who.empty() ? "" : ", ") + std::to_string(world_rank(r));
    }
    who = who.empty() ? "every rank still answers the store; one may be stuck or has left the collective"
                      : "rank " + who + " died or stopped answering";
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception&) {
    who = world_.agent_store ? "the launcher's store is gone (the launcher died)"
                             : "rank 0 is gone (it hosts the rendezvous store)";
  }
  std::string first_line = cause.substr(0, cause.find('\n'));
  throw DistributedError("rank " + std::to_string(world_rank(rank())) + ": " + what + " failed: " + who + " [" + first_line + "]");
}

// One collective: timed, and any failure turned into a DistributedError naming who is gone.
template <typename F>
void Comm::run(const char* what, F&& collective) {
  const Stopwatch timed(*seconds_);
  RECORD_USER_SCOPE(ops::region::kCollective);
  try {
    collective(*group_->pg);
  } catch (const std::exception& e) {
    fail(what, e.what());
  }
}

void Comm::all_reduce(at::Tensor& tensor, Reduce op, const char* what) {
  if (!group_) return;
  run(what, [&](c10d::ProcessGroupGloo& pg) {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = op == Reduce::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    pg.allreduce(tensors, options)->wait();
  });
}

void Comm::all_reduce_sum(at::Tensor& tensor, const char* what) { all_reduce(tensor, Reduce::sum, what); }

void Comm::all_reduce_max(at::Tensor& tensor, const char* what) { all_reduce(tensor, Reduce::max, what); }

at::Tensor Comm::reduce_scatter_sum(const at::Tensor& input, const char* what) {
  if (!group_) return input;
  const std::int64_t chunk = input.numel() / size();
  TORCH_CHECK(chunk * size() == input.numel(), "reduce_scatter_sum: ", input.numel(), " elements in ", size(), " chunks");
  at::Tensor received = at::empty_like(input);
  run(what, [&](c10d::ProcessGroupGloo& pg) {
    at::Tensor send = input.contiguous();
    std::vector<std::int64_t> equal_splits;  // empty: equal chunks
    pg.alltoall_base(received, send, equal_splits, equal_splits)->wait();
  });
  // Chunk j of `received` is rank j's part of my chunk: sum them in rank order.
  return received.view({size(), chunk}).sum(0);
}

at::Tensor Comm::reduce_scatter_sum(const at::Tensor& input, const std::vector<std::int64_t>& splits, const char* what) {
  if (!group_) return input;
  TORCH_CHECK(splits.size() == static_cast<std::size_t>(size()), "reduce_scatter_sum: ", splits.size(), " splits for ", size(), " ranks");
  const std::int64_t mine = splits[static_cast<std::size_t>(rank())];
  at::Tensor received = at::empty({mine * size()}, input.options());
  run(what, [&](c10d::ProcessGroupGloo& pg) {
    at::Tensor send = input.contiguous();
    std::vector<std::int64_t> send_splits = splits, receive_splits(static_cast<std::size_t>(size()), mine);
    pg.alltoall_base(received, send, receive_splits, send_splits)->wait();
  });
  return received.view({size(), mine}).sum(0);
}

void Comm::all_gather(const at::Tensor& chunk, at::Tensor& output, const char* what) {
  if (!group_) {
    output.copy_(chunk.reshape(output.sizes()));
    return;
  }
  run(what, [&](c10d::ProcessGroupGloo& pg) {
    std::vector<at::Tensor> parts;
    for (int r = 0; r < size(); ++r) parts.push_back(output.view({-1}).narrow(0, r * chunk.numel(), chunk.numel()));
    std::vector<std::vector<at::Tensor>> outputs{parts};
    std::vector<at::Tensor> inputs{chunk.contiguous()};
    pg.allgather(outputs, inputs)->wait();
  });
}

Comm::Pending Comm::all_gather_async(const at::Tensor& chunk, at::Tensor& output, const char* what) {
  Pending pending;
  if (!group_) {
    output.copy_(chunk.reshape(output.sizes()));
    return pending;
  }
  pending.comm_ = this;
  pending.what_ = what;
  pending.keep_ = {chunk.contiguous()};
  try {
    std::vector<at::Tensor> parts;
    for (int r = 0; r < size(); ++r) parts.push_back(output.view({-1}).narrow(0, r * chunk.numel(), chunk.numel()));
    std::vector<std::vector<at::Tensor>> outputs{parts};
    pending.work_ = group_->pg->allgather(outputs, pending.keep_);
  } catch (const std::exception& e) {
    fail(what, e.what());
  }
  return pending;
}

void Comm::Pending::wait() {
  if (comm_ == nullptr) return;
  Comm* comm = comm_;
  comm_ = nullptr;
  comm->run(what_, [&](c10d::ProcessGroupGloo& /*pg*/) { work_->wait(); });
  work_.reset();
  keep_.clear();
}

// Through the store rather than Gloo, whose barrier would give up after the timeout even while
// the rank it waits for is busy and well.
void Comm::barrier(const char* what) {
  if (!group_) return;
  const Stopwatch timed(*seconds_);
  const std::string key = keys_ + "barrier/" + std::to_string(barriers_++);
  using Clock = std::chrono::steady_clock;
  try {
    group_->store->add(key, 1);
    auto beats = heartbeats();
    std::vector<Clock::time_point> last_seen(beats.size(), Clock::now());
    auto next_look = Clock::now() + std::chrono::seconds(1);
    for (auto pause = std::chrono::milliseconds(2);; pause = std::min(pause * 2, std::chrono::milliseconds(200))) {
      // Arrivals first: a rank may pass the barrier and then fail (or stop) at once.
      if (group_->store->add(key, 0) >= size()) break;
      throw_if_a_rank_failed(what);
      std::this_thread::sleep_for(pause);
      if (Clock::now() < next_look) continue;
      next_look = Clock::now() + std::chrono::seconds(1);
      const auto now_beats = heartbeats();
      std::string silent;
      for (int r = 0; r < size(); ++r) {
        if (now_beats[r] != beats[r]) last_seen[r] = Clock::now();
        if (r != rank() && Clock::now() - last_seen[r] > timeout_) silent += (silent.empty() ? "" : ", ") + std::to_string(world_rank(r));
      }
      beats = now_beats;
      if (!silent.empty()) {
        throw DistributedError("rank " + std::to_string(world_rank(rank())) + ": " + what + " failed: rank " + silent +
                               " died or stopped answering (no heartbeat for " + std::to_string(timeout_.count() / 1000) +
                               " s, distributed.timeout_s)");
      }
    }
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    fail(what, e.what());
  }
}

}  // namespace ctune::distributed
