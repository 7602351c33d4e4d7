// The `--nproc` launcher as a process, through the real binary (docs/distributed.md, "The
// launcher"): a rank's line without a newline is relayed in bounded pieces, so the launcher's
// memory stays bounded (a reward program printing 64 MiB to stderr); the launcher returns once
// its ranks have exited although their descendants still hold their stderr (a reward program's
// `sleep &`, any process holding a rank's fd); a rank inherits none of the launcher's files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "run_ctune.h"

namespace fs = std::filesystem;

namespace {
using ctune::testing::slurp;
using ctune::testing::write;

const fs::path kDir = fs::path(CTUNE_TEST_DATA_DIR) / ("launcher-" + std::to_string(::getpid()));

// A LoRA run of the tiny model on 2 ranks: instruction data, or with `objective` GRPO on prompts.
std::string recipe(const std::string& objective = "") {
  const std::string d = kDir.string();
  const std::string data = objective.empty() ? "data: {train: " + d + "/train.jsonl, format: instruct, instruct_template: chat, "
                                                   "chat_format: plain, max_seq_len: 64}\n"
                                             : "data: {train: " + d + "/prompts.jsonl, format: prompt, chat_format: plain, max_seq_len: 64}\n";
  return "model: {path: " + d + "/model}\n" + data +
         "peft: {method: lora, rank: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj]}\n"
         "optimizer: {name: adamw, lr: 3.0e-3}\n"
         "training: {batch_size: 1, grad_accum: 1, max_steps: 4, eval_every: 0}\n"
         "checkpoint: {every_n_steps: 0}\n" + objective;
}

// A GRPO recipe whose reward is the shell script `body` (reward.command); its stderr is the
// rank's, as a user's program's is.
fs::path grpo_with_program(const std::string& name, const std::string& body) {
  const fs::path program = kDir / (name + ".sh");
  write(program, "#!/bin/sh\n" + body + "\n");
  fs::permissions(program, fs::perms::owner_all);
  const fs::path yaml = kDir / (name + ".yaml");
  write(yaml, recipe("objective: {name: grpo, num_generations: 4, max_new_tokens: 4}\n"
                     "reward: {command: [" + program.string() + "], timeout_s: 120}\n"));
  return yaml;
}

class Launcher : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(kDir);
    ASSERT_TRUE(ctune::testing::write_tiny_model_and_data(kDir, 40, 4));
    std::string prompts;
    for (int i = 0; i < 8; ++i) prompts += R"({"prompt": "Add )" + std::to_string(i) + R"( and 3 = ", "answer": ")" + std::to_string(i + 3) + "\"}\n";
    write(kDir / "prompts.jsonl", prompts);
  }
  static void TearDownTestSuite() { if (!std::getenv("CTUNE_KEEP_TEST_DATA")) fs::remove_all(kDir); }
};

// A launcher watched from outside while it runs.
struct Watched {
  int status = -1;         // exit code, or 128 + signal
  bool hung = false;       // the hang guard killed it
  long start_kib = 0;      // its VmHWM once its ranks were running
  long peak_kib = 0;       // its VmHWM at the last sample before it exited
  fs::path out, err;       // its stdout and stderr
};

// A process's peak resident memory (VmHWM, KiB); 0 once it has exited.
long peak_resident_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

// Where `pid`'s descriptors point ("pipe:[123]", "socket:[456]", a path).
std::map<int, std::string> fd_targets(pid_t pid) {
  std::map<int, std::string> out;
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (!ec) out[std::stoi(fd.path().filename().string())] = target;
  }
  return out;
}

// The launcher's ranks once each has its stderr on the launcher's pipe (started, past fork's
// redirection); empty while they are not all there.
std::vector<pid_t> running_ranks(pid_t launcher, std::size_t nproc) {
  std::istringstream children(slurp("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children"));
  std::vector<pid_t> ranks;
  for (pid_t pid; children >> pid;) {
    const auto fds = fd_targets(pid);
    if (fds.count(2) && fds.at(2).rfind("pipe:", 0) == 0) ranks.push_back(pid);
  }
  return ranks.size() == nproc ? ranks : std::vector<pid_t>{};
}

// Runs `ctune --threads 1 ARGS` (a launcher of `nproc` ranks), sampling its peak memory every
// 10 ms; `with_ranks` is called once when its ranks are running. Past `guard` the launcher is
// killed (`hung`): a hang guard, far above how long the run takes, not a timing.
Watched watch_launcher(const std::string& name, const std::vector<std::string>& args, std::size_t nproc, std::chrono::seconds guard,
                       const std::function<void(pid_t, const std::vector<pid_t>&)>& with_ranks = {}) {
  Watched w;
  w.out = kDir / (name + ".out");
  w.err = kDir / (name + ".err");
  std::vector<std::string> all = {CTUNE_BINARY, "--threads", "1"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, w.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, w.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t launcher = -1;
  const int spawned = posix_spawn(&launcher, CTUNE_BINARY, &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  EXPECT_EQ(spawned, 0);
  if (spawned != 0) return w;
  const auto deadline = std::chrono::steady_clock::now() + guard;
  int raw = 0;
  while (::waitpid(launcher, &raw, WNOHANG) == 0) {
    if (const long kib = peak_resident_kib(launcher); kib > 0) w.peak_kib = kib;
    if (w.start_kib == 0) {
      if (const auto ranks = running_ranks(launcher, nproc); !ranks.empty()) {
        w.start_kib = peak_resident_kib(launcher);
        if (with_ranks) with_ranks(launcher, ranks);
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      w.hung = true;
      ::kill(launcher, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  w.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return w;
}

void end_process(pid_t pid) {
  if (pid > 0) ::kill(pid, SIGKILL);
}

// Issue 70 (4): a rank printed a 150 MB stderr line without a newline and the launcher held it
// whole (600 MB; 1 GB took it to 1.8 GB and timed a rank out). Here each rank's reward program
// prints 64 MiB of 'x' without a newline: the launcher's peak memory grows by less than 32 MiB
// once its ranks run (measured: 6-8 MiB, as in a run whose ranks print nothing unusual, the
// store's thread; the launcher that held lines whole grew by 256 MiB), and the pieces put
// together are every byte of the line.
TEST_F(Launcher, ALineWithoutANewlineIsRelayedInBoundedPiecesOfBoundedMemory) {
  constexpr long kLine = 64L << 20;
  const fs::path yaml = grpo_with_program("long-line", "head -c " + std::to_string(kLine) + " /dev/zero | tr '\\0' x >&2\n"
                                                       "while IFS= read -r line; do echo 0.5; done");
  const Watched w = watch_launcher("long-line", {"train", yaml.string(), "output_dir=" + (kDir / "long-line").string(), "--nproc", "2"}, 2,
                                   std::chrono::seconds(300));
  ASSERT_FALSE(w.hung);
  EXPECT_EQ(w.status, 0) << slurp(w.out);
  ASSERT_GT(w.start_kib, 0) << "the ranks were not seen running";
  EXPECT_LT(w.peak_kib - w.start_kib, 32L << 10) << "launcher's VmHWM with ranks running " << w.start_kib << " KiB, at the end " << w.peak_kib
                                                 << " KiB, while each rank printed a " << kLine << "-byte line";
  // Each rank's line, put together from its pieces: the first "[rank R] ", the others
  // "[rank R, continued] ", none longer than the bound.
  std::map<int, long> relayed;
  std::map<int, int> pieces;
  std::ifstream err(w.err, std::ios::binary);
  for (std::string line; std::getline(err, line);) {
    for (int rank : {0, 1}) {
      const std::string first = "[rank " + std::to_string(rank) + "] ", next = "[rank " + std::to_string(rank) + ", continued] ";
      const bool is_first = line.rfind(first + "xxxx", 0) == 0, is_next = line.rfind(next, 0) == 0;
      if (!is_first && !is_next) continue;
      const std::string body = line.substr((is_first ? first : next).size());
      EXPECT_LE(body.size(), 64u << 10) << "a piece of rank " << rank << "'s line";
      // The line's last piece runs on into the rank's next line (the same stream).
      const std::size_t xs = std::min(body.find_first_not_of('x'), body.size());
      relayed[rank] += static_cast<long>(xs);
      pieces[rank] += xs > 0;
    }
  }
  for (int rank : {0, 1}) {
    EXPECT_EQ(relayed[rank], kLine) << "rank " << rank << "'s line, relayed";
    EXPECT_EQ(pieces[rank], kLine / (64 << 10)) << "rank " << rank;
  }
}

// Issue 70 (5): a reward program's background child held the ranks' stderr, and the launcher
// waited for it (training took 0.4 s; the command returned when `sleep 40` ended, never with a
// long-lived helper). Here the reward program leaves `sleep 300` behind; the launcher must
// return with the ranks' status (the hang guard, 120 s, is far above the run's few seconds).
TEST_F(Launcher, ReturnsWhenItsRanksExitThoughAChildOfTheirRewardProgramHoldsTheirStderr) {
  const fs::path pids = kDir / "sleepers";
  const fs::path yaml = grpo_with_program("sleeper", "sleep 300 & echo $! >>" + pids.string() + "\n"
                                                     "while IFS= read -r line; do echo 0.5; done");
  const Watched w = watch_launcher("sleeper", {"train", yaml.string(), "output_dir=" + (kDir / "sleeper").string(), "--nproc", "2"}, 2,
                                   std::chrono::seconds(120));
  std::istringstream sleepers(slurp(pids));
  int holders = 0;
  for (pid_t pid; sleepers >> pid; ++holders) end_process(pid);
  EXPECT_GE(holders, 2) << "each rank's reward program left a child";
  EXPECT_FALSE(w.hung) << "the launcher waited for its ranks' reward programs' children:\n" << slurp(w.err);
  EXPECT_EQ(w.status, 0) << slurp(w.err);
  EXPECT_NE(slurp(w.err).find("[rank 0] "), std::string::npos);
}

// The same without GRPO: any process that holds a rank's stderr (here one that opened it
// through /proc, as an inherited descriptor would be held) does not keep the launcher alive.
// Meanwhile: a rank holds none of the launcher's descriptors (store socket, the other ranks'
// pipes) but its own stdin, stdout and stderr, so nothing a rank starts can hold them either.
TEST_F(Launcher, ReturnsWhenItsRanksExitThoughAnotherProcessHoldsTheirStderr) {
  write(kDir / "plain.yaml", recipe());
  pid_t holder = -1;
  std::vector<std::string> shared;
  const Watched w = watch_launcher(
      "held", {"train", (kDir / "plain.yaml").string(), "output_dir=" + (kDir / "held").string(), "--nproc", "2"}, 2,
      std::chrono::seconds(120), [&](pid_t launcher, const std::vector<pid_t>& ranks) {
        const std::string err = "/proc/" + std::to_string(ranks[1]) + "/fd/2";
        posix_spawn_file_actions_t files;
        posix_spawn_file_actions_init(&files);
        posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err.c_str(), O_WRONLY, 0);
        char sleep[] = "sleep", seconds[] = "300";
        char* argv[] = {sleep, seconds, nullptr};
        EXPECT_EQ(posix_spawnp(&holder, "sleep", &files, nullptr, argv, environ), 0);
        posix_spawn_file_actions_destroy(&files);
        // The launcher's own: what it holds and did not inherit from this test (a caller's
        // descriptors, a make jobserver's, pass through to the ranks as through any program).
        auto launchers = fd_targets(launcher);
        for (const auto& [fd, target] : fd_targets(::getpid()))
          for (auto it = launchers.begin(); it != launchers.end();) it = it->second == target ? launchers.erase(it) : std::next(it);
        for (pid_t rank : ranks) {
          for (const auto& [fd, target] : fd_targets(rank)) {
            if (fd <= 2) continue;
            // Pipes and sockets are named by inode: the same name is the same object.
            const bool object = target.rfind("pipe:", 0) == 0 || target.rfind("socket:", 0) == 0;
            for (const auto& [launcher_fd, launcher_target] : launchers)
              if (object && target == launcher_target) shared.push_back(std::to_string(fd) + " -> " + target);
          }
        }
      });
  const bool held = fd_targets(holder).count(2) && fd_targets(holder).at(2).rfind("pipe:", 0) == 0;
  end_process(holder);
  EXPECT_TRUE(held) << "the holder had the rank's stderr";
  EXPECT_FALSE(w.hung) << "the launcher waited for a process holding a rank's stderr:\n" << slurp(w.err);
  EXPECT_EQ(w.status, 0) << slurp(w.err);
  EXPECT_TRUE(shared.empty()) << "a rank inherited the launcher's " << shared.front();
}

}  // namespace
