// `ctune train RECIPE --nproc N`: the built-in launcher. It hosts the rendezvous store (as
// torchrun's agent does, but on a private Unix socket: dist/local_store.h), starts N ranks of
// the same command on this machine with the torchrun variables set (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, TORCHELASTIC_USE_AGENT_STORE=True) and
// the store's CTUNE_STORE_SOCKET and CTUNE_STORE_SECRET, prefixes every line they print with
// "[rank R] " (in pieces of bounded size: distributed/line_relay.h), forwards SIGTERM/SIGINT to
// them (so a preempted run checkpoints; SIGTSTP is forwarded as SIGTERM, since stopped ranks
// would time each other out), and when one rank fails gives the others `grace` to exit on their
// own, then kills them. Returns once every rank has exited, whoever else still holds their
// output (docs/distributed.md, "The launcher"), the exit status of the first rank that failed
// (0 when all succeed). Throws IoError when a rank cannot be started (the others are killed).
#pragma once

#include <chrono>

namespace ctune::distributed {

int launch_local(int nproc, std::chrono::milliseconds grace);

}  // namespace ctune::distributed
