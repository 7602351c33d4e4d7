// Where this process stands in a multi-process run: its rank, the world size, its rank within
// its node and how to reach the rendezvous store. Read from the environment in the conventions
// of torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RESTART_COUNT) or of Slurm (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or SLURM_STEP_TASKS_PER_NODE, and the
// master from MASTER_ADDR or the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST). With
// neither, a world of one process. CTUNE_RUN_SECRET, when set, names the run's keys (see
// World::keys_secret). See docs/distributed.md.
#pragma once

#include <functional>
#include <string>

namespace ctune::distributed {

struct World {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // within this node; ranks fill nodes in order
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The launcher (torchrun's agent, or `ctune train --nproc`) hosts the store: every rank is
  // a client. Otherwise rank 0 hosts it.
  bool agent_store = false;
  std::string store_prefix = "ctune/0/";  // keys of this attempt (restart count, run secret)
  // `ctune train --nproc`: the launcher's store on a Unix socket, and the secret it asks for
  // (CTUNE_STORE_SOCKET, CTUNE_STORE_SECRET). Empty: the TCP store at master_addr:master_port.
  std::string store_socket, store_secret;
  // CTUNE_RUN_SECRET was given (a multi-node launch): the run's keys carry a digest of it, so a
  // process that reaches the TCP store without it cannot address them (docs/distributed.md).
  bool keys_secret = false;
  std::string source = "single process";  // which variables described it, for messages
  bool from_environment = false;  // a launcher's variables describe it (even a world of one)

  bool distributed() const { return size > 1; }
  int node() const { return rank / local_size; }
  int nodes() const { return size / local_size; }
};

// Reads the variables through `get` (nullptr when unset). Throws ConfigError naming the
// variable for a malformed or inconsistent value.
using EnvReader = std::function<const char*(const char*)>;
World world_from(const EnvReader& get);
World world_from_env();

// The variables that carry a run's rendezvous and its secrets: the --nproc launcher's store
// (CTUNE_STORE_SOCKET, CTUNE_STORE_SECRET) and the user's CTUNE_RUN_SECRET. A program the run
// starts that is not one of its ranks (a reward program) is started without them.
inline constexpr const char* kRendezvousVariables[] = {"CTUNE_STORE_SOCKET", "CTUNE_STORE_SECRET", "CTUNE_RUN_SECRET"};

// The first host of a Slurm node list: "gpu[07-09,12],cpu1" -> "gpu07".
std::string first_host(const std::string& nodelist);

}  // namespace ctune::distributed
