// GRPO reward functions and reward programs against the real binary (docs/objectives.md#rewards):
// what a reward.command program can do to a run and what the run owes it back. A request larger
// than a pipe to a program that does not read ends within reward.timeout_s; a stop signal to the
// run's whole process group (Ctrl-C, scancel, a container's stop) or to every process of the job
// (Slurm) finishes the step and checkpoints; a `regex` reward whose pattern comes from the data
// cannot hold the run; nothing a program started outlives the run; a program gets none of the
// run's descriptors or rendezvous secrets; one answer per request; --resume says when the
// program changed. Each program here is a small script; each run is a tiny model for a few steps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/json.h"
#include "run_ctune.h"

namespace fs = std::filesystem;

namespace {
using ctune::Json;
using ctune::testing::ctune;
using ctune::testing::ctune_through;
using ctune::testing::expect_one_line_failure;
using ctune::testing::last_line;
using ctune::testing::slurp;
using ctune::testing::write;

const fs::path kDir = fs::path(CTUNE_TEST_DATA_DIR) / ("rewards-" + std::to_string(::getpid()));
// A guard against a hang, never a measure of time: the runs here take seconds.
const std::string kGuard = "timeout -s KILL 120";

class Rewards : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(kDir);
    ASSERT_TRUE(ctune::testing::write_tiny_model_and_data(kDir, 4, 1));
  }
  static void TearDownTestSuite() {
    if (!std::getenv("CTUNE_KEEP_TEST_DATA")) fs::remove_all(kDir);
  }
};

// 8 prompts ("Add i and 3 = ") with their answer and `more` (JSON members: `, "notes": "..."`).
fs::path write_prompts(const std::string& name, const std::string& more = "") {
  std::string text;
  for (int i = 0; i < 8; ++i)
    text += R"({"prompt": "Add )" + std::to_string(i) + R"( and 3 = ", "answer": ")" + std::to_string(i + 3) + "\"" + more + "}\n";
  write(kDir / (name + ".jsonl"), text);
  return kDir / (name + ".jsonl");
}

// A GRPO LoRA run over `prompts`: 2 prompts x 2 completions a step (4 rewards), `steps` steps,
// no periodic checkpoint; `reward`: the members of the recipe's reward map.
std::string grpo_recipe(const std::string& name, const fs::path& prompts, const std::string& reward, int steps = 3, int new_tokens = 4) {
  const fs::path path = kDir / (name + ".yaml");
  write(path, "output_dir: " + (kDir / name).string() + "\nmodel: {path: " + (kDir / "model").string() + "}\n" +
                  "data: {train: " + prompts.string() + ", format: prompt, chat_format: plain, max_seq_len: 64}\n" +
                  "peft: {method: lora, rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}\n"
                  "optimizer: {name: adamw, lr: 3.0e-3}\n"
                  "training: {batch_size: 2, grad_accum: 1, max_steps: " + std::to_string(steps) + "}\n" +
                  "checkpoint: {every_n_steps: 0}\n"
                  "objective: {name: grpo, num_generations: 2, max_new_tokens: " + std::to_string(new_tokens) + "}\n" +
                  "reward: {" + reward + "}\n");
  return path.string();
}

// An executable file kDir/name holding `text`; its path.
std::string program(const std::string& name, const std::string& text) {
  const fs::path path = kDir / name;
  write(path, text);
  fs::permissions(path, fs::perms::owner_all);
  return path.string();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The training steps' losses and rewards in metrics.jsonl, as written.
std::vector<std::string> trajectory(const fs::path& run) {
  std::vector<std::string> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (j.contains("loss")) out.push_back(j["step"].dump() + " " + j["loss"].dump() + " " + j["reward"].dump());
  }
  return out;
}

// A field of 100 KiB in every record: a request larger than a pipe holds (64 KiB). To a program
// that never reads (hung, busy, stopped), ctune blocked in write() for ever: deaf to
// reward.timeout_s and to SIGTERM. Now the whole request and its answer share the timeout. A
// program that does read gets the whole request.
TEST_F(Rewards, ARequestLargerThanAPipeEndsWithinTheTimeout) {
  const fs::path prompts = write_prompts("long", R"(, "notes": ")" + std::string(100 * 1024, 'n') + "\"");
  const std::string hung = program("hung.sh", "#!/bin/sh\nexec sleep 300\n");
  const auto r = ctune_through(kGuard, {"train", grpo_recipe("long-hung", prompts, "command: [" + hung + "], timeout_s: 2")});
  EXPECT_EQ(r.status, 1) << "124 or 137: the guard ended a hang\n" << r.err;
  EXPECT_NE(last_line(r.err).find("did not read its whole request"), std::string::npos) << r.err;
  EXPECT_NE(last_line(r.err).find("data.train record"), std::string::npos) << r.err;

  // Answers the length of the notes it was sent.
  const std::string reader = program("reader.py", "#!/usr/bin/python3\nimport json, sys\nfor line in sys.stdin:\n"
                                                  "    print(len(json.loads(line)['fields']['notes']) / 102400, flush=True)\n");
  const auto ok = ctune_through(kGuard, {"train", grpo_recipe("long-read", prompts, "command: [" + reader + "], timeout_s: 10")});
  ASSERT_EQ(ok.status, 0) << ok.err;
  for (const auto& step : trajectory(kDir / "long-read")) EXPECT_EQ(step.substr(step.rfind(' ') + 1), "1.0") << step;
}

// Answers each completion with its length modulo 3 (the same completions, the same rewards);
// at its 6th request (in step 2), when `mark` does not exist yet, creates it and runs `act`.
std::string signalling_program(const std::string& name, const fs::path& mark, const std::string& act) {
  return program(name, "#!/usr/bin/python3\nimport json, os, signal, sys\nn = 0\nfor line in sys.stdin:\n    n += 1\n"
                       "    if n == 6 and not os.path.exists('" + mark.string() + "'):\n        open('" + mark.string() + "', 'w').close()\n" +
                       "        " + act + "\n" +
                       "    print(len(json.loads(line)['completion']) % 3, flush=True)\n");
}

// Ctrl-C in a terminal, Slurm's scancel and a container's stop signal the run's whole process
// group. The reward program was in it and died first: the run ended with "stopped before
// answering ... killed by signal 15" and no checkpoint (every_n_steps 0: every step lost). In
// a group of its own it answers on, the step finishes, the stop writes its checkpoint (exit
// 143), and --resume, which starts the program again, ends with the uninterrupted trajectory.
TEST_F(Rewards, ASignalToTheRunsProcessGroupFinishesTheStep) {
  const fs::path prompts = write_prompts("group"), mark = kDir / "group.mark";
  const std::string grader =
      signalling_program("group.py", mark, "os.killpg(os.getpgid(os.getppid()), signal.SIGTERM)  # the run's group, as Ctrl-C");
  const std::string recipe = grpo_recipe("group", prompts, "command: [" + grader + "]", 4);
  write(mark, "");  // the uninterrupted run: no signal
  ASSERT_EQ(ctune_through(kGuard, {"train", recipe, "output_dir=" + (kDir / "group-reference").string()}).status, 0);
  fs::remove(mark);
  const fs::path run = kDir / "group-run";
  // setsid: the run leads a group of its own, which the test process is not in.
  const auto stopped = ctune_through(kGuard + " setsid", {"train", recipe, "output_dir=" + run.string()});
  EXPECT_EQ(stopped.status, 143) << stopped.err;
  EXPECT_NE(last_line(stopped.err).find("stopped: SIGTERM after step 2 of 4: checkpoint"), std::string::npos) << stopped.err;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_00000002" / "MANIFEST.json"));
  const auto resumed = ctune_through(kGuard, {"train", recipe, "output_dir=" + run.string(), "--resume"});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(trajectory(run), trajectory(kDir / "group-reference"));
}

// Slurm signals every process of the job, the reward program too, and its own group does not
// shield it: one that dies of the very signal the run is stopping on (killed by it, or exiting
// 128 + signal as a shell does) is started again and asked again, so the step completes and the
// stop saves it (143 / 130). Before: "stopped before answering ... killed by signal 15", exit 1.
TEST_F(Rewards, AProgramKilledWithTheRunIsRestartedToFinishTheStep) {
  const fs::path prompts = write_prompts("job");
  const std::vector<std::tuple<std::string, std::string, int>> cases = {
      {"killed", "os.kill(os.getppid(), signal.SIGTERM); os.kill(os.getpid(), signal.SIGTERM)", 143},
      {"exits", "os.kill(os.getppid(), signal.SIGINT); sys.exit(130)", 130}};
  for (const auto& [name, act, status] : cases) {
    const fs::path mark = kDir / ("job-" + name + ".mark"), run = kDir / ("job-" + name);
    const std::string grader = signalling_program("job-" + name + ".py", mark, act);
    const auto r = ctune_through(kGuard, {"train", grpo_recipe("job", prompts, "command: [" + grader + "]", 4), "output_dir=" + run.string()});
    EXPECT_EQ(r.status, status) << name << "\n" << r.err;
    EXPECT_NE(r.err.find("started again to finish the step"), std::string::npos) << name << "\n" << r.err;
    EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_00000002" / "MANIFEST.json")) << name << "\n" << r.err;
  }
}

// A `regex` reward whose pattern comes from the data: (.|.)*QQQ backtracked without end in
// std::regex (a run at full CPU for ten minutes, deaf to SIGTERM). Oniguruma rules it out at
// once (no QQQ); (.|.)*(?!), which defeats its shortcuts, meets the bound on backtracking
// steps: the completion scores 0 with one warning naming the record, and is counted.
TEST_F(Rewards, ARegexFromTheDataCannotHoldTheRun) {
  std::string text;
  for (int i = 0; i < 8; ++i)
    text += R"({"prompt": "Add )" + std::to_string(i) + R"( and 3 = ", "pattern": ")" + (i % 2 ? "(.|.)*(?!)" : "(.|.)*QQQ") + "\"}\n";
  write(kDir / "regex.jsonl", text);
  const auto r = ctune_through(kGuard, {"train", grpo_recipe("regex", kDir / "regex.jsonl", "regex: {field: pattern}", 2, 40)});
  ASSERT_EQ(r.status, 0) << "124 or 137: the guard ended a hang\n" << r.err;
  EXPECT_NE(r.err.find("backtracking steps"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(.|.)*(?!)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(.|.)*QQQ"), std::string::npos) << r.err;
  double errors = 0;
  std::ifstream in(kDir / "regex" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (j.contains("loss")) errors += j["rewards/regex/errors"].get<double>();
  }
  EXPECT_GT(errors, 0.0);
}

// Whether process `pid` still runs (a zombie does not).
bool running(long pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

// A program's children were left running when the run ended (it was killed, they were not).
// Now the program's process group is killed whenever the run ends: finished, failed, stopped,
// stopped at once by a second signal.
TEST_F(Rewards, NothingAProgramStartedOutlivesTheRun) {
  const fs::path prompts = write_prompts("children"), pids = kDir / "children.pids";
  auto grader = [&](const std::string& answer) {
    return program("children.sh", "#!/bin/sh\nsleep 300 &\necho $! >>" + pids.string() + "\nwhile IFS= read -r line; do echo " + answer +
                                      "; done\n");
  };
  const std::vector<std::tuple<std::string, std::string, std::string, int>> ends = {
      {"finished", "1", "", 0},
      {"failed", "oops", "", 1},
      {"stopped", "1", "step:2:mid=TERM", 143},
      {"stopped at once", "1", "step:2:mid=TERM,step:2:after=TERM", 143}};  // the second signal's _exit runs no destructor
  for (const auto& [name, answer, kill_at, status] : ends) {
    fs::remove(pids);
    if (!kill_at.empty()) ::setenv("CTUNE_KILL_AT", kill_at.c_str(), 1);
    const auto r = ctune_through(kGuard, {"train", grpo_recipe("children", prompts, "command: [" + grader(answer) + "]"),
                                          "output_dir=" + (kDir / ("children-" + name)).string()});
    ::unsetenv("CTUNE_KILL_AT");
    EXPECT_EQ(r.status, status) << name << "\n" << r.err;
    std::istringstream in(slurp(pids));
    int children = 0;
    for (long pid; in >> pid; ++children) {
      // SIGKILL is delivered at once; the wait bounds a slow machine, it measures nothing.
      for (int i = 0; i < 100 && running(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_FALSE(running(pid)) << name << ": the program's child " << pid << " outlived the run";
    }
    EXPECT_GT(children, 0) << name;
  }
}

// A grader that runs model-written code hands it whatever it inherited: it had train.log's
// descriptor and, under --nproc, the store's secret (CTUNE_STORE_SECRET), a rank's sockets and
// epoll. Now: stdin, stdout and stderr only, and no rendezvous variable.
TEST_F(Rewards, AProgramGetsNoDescriptorOrSecretOfTheRun) {
  const fs::path prompts = write_prompts("inherit"), seen = kDir / "inherit-seen";
  fs::create_directories(seen);
  // What it holds as it starts: each descriptor and where it leads; its environment.
  const std::string grader = program(
      "inherit.py", "#!/usr/bin/python3\nimport os, sys\nfds = []\nfor fd in os.listdir('/proc/self/fd'):\n    try:\n"
                    "        fds.append(fd + ' ' + os.readlink('/proc/self/fd/' + fd))\n    except OSError:\n        pass\n"
                    "open('" + seen.string() + "/fds.%d' % os.getpid(), 'w').write('\\n'.join(fds))\n"
                    "open('" + seen.string() + "/env.%d' % os.getpid(), 'w').write('\\n'.join(os.environ))\n"
                    "for line in sys.stdin:\n    print(1, flush=True)\n");
  const auto r = ctune_through(kGuard, {"train", grpo_recipe("inherit", prompts, "command: [" + grader + "]", 1), "--nproc", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  int programs = 0;
  for (const auto& entry : fs::directory_iterator(seen)) {
    const std::string file = entry.path().filename().string();
    std::istringstream lines(slurp(entry.path()));
    if (file.rfind("env.", 0) == 0) {
      ++programs;
      for (std::string name; std::getline(lines, name);)
        for (const char* secret : {"CTUNE_STORE_SECRET", "CTUNE_STORE_SOCKET", "CTUNE_RUN_SECRET"}) EXPECT_NE(name, secret) << file;
      continue;
    }
    for (std::string line; std::getline(lines, line);) {
      if (std::stoi(line) <= 2) continue;  // stdin and stdout are its pipes, stderr the user's
      // Above: only what Python opened itself (the listing of /proc/self/fd).
      for (const char* inherited : {"train.log", "socket:", "anon_inode:", "pipe:"})
        EXPECT_EQ(line.find(inherited), std::string::npos) << file << ": " << line;
    }
  }
  EXPECT_EQ(programs, 2) << "one program per rank";
}

// ctune's waiting threads spin briefly and then sleep (GOMP_SPINCOUNT, given before libgomp
// starts: a command that computes starts itself again with it, src/cli/process_start.cpp), so a
// reward program beside the run gets the cores while the run waits for it; what ctune starts
// inherits the setting, and a user's own wait policy is kept as given (docs/performance.md,
// "Beside a neighbour").
TEST_F(Rewards, TheRunsWaitingThreadsLeaveTheCoresToTheProgram) {
  const fs::path prompts = write_prompts("wait");
  const std::string grader = program(
      "wait.sh", "#!/bin/sh\necho \"${GOMP_SPINCOUNT:-unset} ${OMP_WAIT_POLICY:-unset}\" > \"$0.$1\"\nwhile read -r line; do echo 1; done\n");
  const auto ours = ctune_through("env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY " + kGuard, {"train", grpo_recipe("wait-ours", prompts, "command: [" + grader + ", ours]", 1)});
  ASSERT_EQ(ours.status, 0) << ours.err;
  EXPECT_EQ(slurp(grader + ".ours"), "10000 unset\n");
  const auto users = ctune_through("env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=ACTIVE " + kGuard, {"train", grpo_recipe("wait-users", prompts, "command: [" + grader + ", users]", 1)});
  ASSERT_EQ(users.status, 0) << users.err;
  EXPECT_EQ(slurp(grader + ".users"), "unset ACTIVE\n");
}

// What a program answers: exactly one number per request. A second line for one request was
// taken for the next request's answer, silently; now it ends the run naming the sample. A
// directory passed the check of reward.command (access X_OK) and failed at the first request;
// now it is refused before anything runs. Answers of +-1e300 overflow their group's spread (the
// advantages are not finite): one warning, not silence.
TEST_F(Rewards, AProgramAnswersOneNumberPerRequest) {
  const fs::path prompts = write_prompts("answers");
  const std::string twice = program("twice.sh", "#!/bin/sh\nwhile IFS= read -r line; do printf '1\\n1\\n'; done\n");
  const auto r = ctune_through(kGuard, {"train", grpo_recipe("answers-twice", prompts, "command: [" + twice + "]")});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(last_line(r.err).find("printed a second line for one request"), std::string::npos) << r.err;
  EXPECT_NE(last_line(r.err).find("scoring a completion of data.train record"), std::string::npos) << r.err;

  fs::create_directories(kDir / "grader-dir");
  expect_one_line_failure(ctune_through(kGuard, {"train", grpo_recipe("answers-dir", prompts, "command: [" + (kDir / "grader-dir").string() + "]")}),
                          "is not an executable program", "a directory as reward.command");

  const std::string huge = program("huge.sh", "#!/bin/sh\nsign=\nwhile IFS= read -r line; do echo ${sign}1e300; "
                                              "if [ -z \"$sign\" ]; then sign=-; else sign=; fi; done\n");
  const auto h = ctune_through(kGuard, {"train", grpo_recipe("answers-huge", prompts, "command: [" + huge + "]")});
  ASSERT_EQ(h.status, 0) << h.err;
  EXPECT_EQ(count(h.err, "overflows its spread"), 1) << h.err;
}

// A run's checkpoints record its reward program; --resume with a program whose content changed
// since (a fixed grader) says so in one warning and goes on. Before, nothing was said.
TEST_F(Rewards, ResumeSaysWhenTheProgramChanged) {
  const fs::path prompts = write_prompts("resume"), run = kDir / "resume";
  const std::string grader = program("resume.sh", "#!/bin/sh\nwhile IFS= read -r line; do echo 1; done\n");
  const std::string recipe = grpo_recipe("resume", prompts, "command: [" + grader + "]", 4);
  ::setenv("CTUNE_KILL_AT", "step:2:after", 1);
  const auto killed = ctune({"train", recipe, "checkpoint.every_n_steps=1"});
  ::unsetenv("CTUNE_KILL_AT");
  ASSERT_EQ(killed.status, 137) << killed.err;
  ::setenv("CTUNE_KILL_AT", "step:3:after", 1);
  const auto same = ctune({"train", recipe, "checkpoint.every_n_steps=1", "--resume"});
  ::unsetenv("CTUNE_KILL_AT");
  ASSERT_EQ(same.status, 137) << same.err;
  EXPECT_EQ(same.err.find("reward.command is not what"), std::string::npos) << same.err;
  program("resume.sh", "#!/bin/sh\nwhile IFS= read -r line; do echo 0.5; done\n");
  const auto changed = ctune({"train", recipe, "checkpoint.every_n_steps=1", "--resume"});
  ASSERT_EQ(changed.status, 0) << changed.err;
  EXPECT_EQ(count(changed.err, "reward.command is not what the run of"), 1) << changed.err;
  EXPECT_NE(changed.err.find(fs::path(grader).lexically_normal().string() + " holds other content"), std::string::npos) << changed.err;
}

}  // namespace
