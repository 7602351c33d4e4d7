#include "distributed/world.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace ctune::distributed {

namespace {

int int_var(const EnvReader& get, const char* name, int fallback, int min_value) {
  const char* text = get(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < min_value || v > 1'000'000) {
    throw ConfigError(std::string("environment variable ") + name + ": expected an integer >= " + std::to_string(min_value) +
                      ", found \"" + text + "\"");
  }
  return static_cast<int>(v);
}

// Slurm's task counts per node: "4", "4(x2)", "4(x2),3" -> the first count (4).
int leading_count(const EnvReader& get, const char* name) {
  const char* text = get(name);
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return v > 0 ? static_cast<int>(v) : 0;
}

void check(const World& w) {
  const std::string from = " (from " + w.source + ")";
  if (w.rank >= w.size)
    throw ConfigError("rank " + std::to_string(w.rank) + " is outside the world of " + std::to_string(w.size) + " ranks" + from);
  if (w.local_rank >= w.local_size)
    throw ConfigError("local rank " + std::to_string(w.local_rank) + " is outside the node's " + std::to_string(w.local_size) +
                      " ranks" + from);
  if (w.size % w.local_size != 0)
    throw ConfigError("world size " + std::to_string(w.size) + " is not a multiple of the ranks per node (" +
                      std::to_string(w.local_size) + ")" + from);
  if (w.master_port < 1 || w.master_port > 65535)
    throw ConfigError("master port " + std::to_string(w.master_port) + " is not a TCP port" + from);
}

// FNV-1a over the secret, twice with different seeds: a stable 32-hex-digit name for it.
std::string digest(const std::string& secret) {
  std::string hex;
  for (std::uint64_t seed : {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull}) {
    std::uint64_t h = seed;
    for (unsigned char c : secret) h = (h ^ c) * 0x100000001b3ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    hex += buf;
  }
  return hex;
}

// The run's secret from the launch, if any: the built-in launcher's store secret, or a
// CTUNE_RUN_SECRET the user set for every rank of a multi-node run.
void read_secrets(const EnvReader& get, World& w) {
  const char* socket = get("CTUNE_STORE_SOCKET");
  const char* secret = get("CTUNE_STORE_SECRET");
  if ((socket != nullptr) != (secret != nullptr))
    throw ConfigError("environment: CTUNE_STORE_SOCKET and CTUNE_STORE_SECRET must be set together (the --nproc launcher sets both)");
  if (socket != nullptr) {
    w.store_socket = socket;
    w.store_secret = secret;
  }
  if (const char* run = get("CTUNE_RUN_SECRET"); run != nullptr) {
    if (std::strlen(run) < 16)
      throw ConfigError("environment variable CTUNE_RUN_SECRET: expected at least 16 characters (a random string every rank shares), found " +
                        std::to_string(std::strlen(run)));
    w.store_prefix += digest(run) + "/";
    w.keys_secret = true;
  }
}

}  // namespace

std::string first_host(const std::string& nodelist) {
  std::string out;
  int depth = 0;
  bool in_range = false, range_done = false;
  for (char c : nodelist) {
    if (c == '[') {
      ++depth;
      in_range = true;
      range_done = false;
      continue;
    }
    if (c == ']') {
      --depth;
      in_range = false;
      continue;
    }
    if (depth == 0 && c == ',') break;
    if (in_range) {
      if (c == ',' || c == '-') range_done = true;
      if (!range_done) out += c;
      continue;
    }
    out += c;
  }
  return out;
}

World world_from(const EnvReader& get) {
  World w;
  const bool torchrun = get("RANK") != nullptr || get("WORLD_SIZE") != nullptr;
  const bool slurm = !torchrun && get("SLURM_PROCID") != nullptr && get("SLURM_NTASKS") != nullptr;
  if (torchrun) {
    w.source = "RANK/WORLD_SIZE";
    if (get("RANK") == nullptr || get("WORLD_SIZE") == nullptr)
      throw ConfigError("environment: RANK and WORLD_SIZE must be set together (found only " +
                        std::string(get("RANK") ? "RANK" : "WORLD_SIZE") + ")");
    w.size = int_var(get, "WORLD_SIZE", 1, 1);
    w.rank = int_var(get, "RANK", 0, 0);
    w.local_size = int_var(get, "LOCAL_WORLD_SIZE", w.size, 1);
    w.local_rank = int_var(get, "LOCAL_RANK", w.rank % w.local_size, 0);
    const char* agent = get("TORCHELASTIC_USE_AGENT_STORE");
    w.agent_store = agent != nullptr && std::string(agent) == "True";
    w.store_prefix = "ctune/" + std::to_string(int_var(get, "TORCHELASTIC_RESTART_COUNT", 0, 0)) + "/";
  } else if (slurm) {
    w.source = "SLURM_PROCID/SLURM_NTASKS";
    w.size = int_var(get, "SLURM_NTASKS", 1, 1);
    w.rank = int_var(get, "SLURM_PROCID", 0, 0);
    int per_node = int_var(get, "SLURM_NTASKS_PER_NODE", 0, 0);
    if (per_node == 0) per_node = leading_count(get, "SLURM_STEP_TASKS_PER_NODE");
    if (per_node == 0) per_node = leading_count(get, "SLURM_TASKS_PER_NODE");
    w.local_size = per_node > 0 ? per_node : w.size;
    w.local_rank = int_var(get, "SLURM_LOCALID", w.rank % w.local_size, 0);
    const char* nodes = get("SLURM_STEP_NODELIST") ? get("SLURM_STEP_NODELIST") : get("SLURM_JOB_NODELIST");
    if (nodes != nullptr && get("MASTER_ADDR") == nullptr) w.master_addr = first_host(nodes);
    w.store_prefix = "ctune/" + std::to_string(int_var(get, "SLURM_RESTART_COUNT", 0, 0)) + "/";
  } else {
    return w;
  }
  w.from_environment = true;
  read_secrets(get, w);
  if (const char* addr = get("MASTER_ADDR"); addr != nullptr && *addr != '\0') w.master_addr = addr;
  w.master_port = int_var(get, "MASTER_PORT", w.master_port, 0);
  check(w);
  return w;
}

World world_from_env() {
  return world_from([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace ctune::distributed
