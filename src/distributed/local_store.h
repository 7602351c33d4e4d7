// The rendezvous store of `ctune train --nproc` (docs/distributed.md, "Trust model"): a
// key-value server inside the launcher, reached over a Unix socket in a private directory (mode
// 0700), so the run opens no TCP port for it. LibTorch 1.13's TCPStore listens on every
// interface whatever host it is given, and any host that reached it could set the run's keys.
// Here every connection must come from this user (SO_PEERCRED) and show the run's secret first;
// keys and values are bounded in size; a refused connection is reported on stderr.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ctune::distributed {

class StoreServer {
 public:
  // Creates the directory, the socket and a random secret, and starts serving on a thread.
  StoreServer();
  // Stops serving and removes the socket and its directory.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  const std::string& socket_path() const;
  const std::string& secret() const;
  // Connections refused so far (another user, a wrong secret, a malformed or oversized request).
  int refused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A rank's client of the server at `socket_path`. Throws std::runtime_error when the server is
// unreachable or refuses the secret; every request fails after `timeout` without an answer.
c10::intrusive_ptr<c10d::Store> connect_local_store(const std::string& socket_path, const std::string& secret,
                                                    std::chrono::milliseconds timeout);

// Bounds of one request, on both sides.
inline constexpr std::size_t kMaxStoreKey = 4096;
inline constexpr std::size_t kMaxStoreValue = 1 << 20;

}  // namespace ctune::distributed
