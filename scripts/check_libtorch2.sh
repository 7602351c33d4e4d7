#!/usr/bin/env bash
# Builds ctune from this working tree against LibTorch 2.6 and runs its tests there, on a machine
# that has LibTorch 1.13 (Debian 12): inside a Debian 13 ("trixie") root made with debootstrap,
# which has `libtorch-dev` 2.6 in main. Not part of CI: the root costs about 0.6 GB of downloads
# and 3.6 GB of disk once, and the build in it starts cold (no ccache shared with the host).
# What it found and the figures: docs/build.md.
#
#   bash scripts/check_libtorch2.sh          # CPU LibTorch 2.6: the README's test command
#   CUDA=1 bash scripts/check_libtorch2.sh   # CUDA LibTorch 2.6 (contrib) and the CUDA toolkit
#                                            # (non-free): ctune and test_cuda compiled and
#                                            # linked, `ctune --help`, `ctest -R Cuda`, ldd
#   bash scripts/check_libtorch2.sh 'cd /ctune/build && ninja -k 0'
#                                            # any command in the root, with the tree mounted
#
# The roots are cached outside the tree, in $CTUNE_TRIXIE_ROOT (default /var/cache/ctune-trixie):
# cpu/ first, cuda/ as a copy of it with the CUDA packages added. Each keeps its build folder
# (/var/lib/ctune-build) and its ccache, so a second run rebuilds only what changed. The tree is
# bind-mounted at /ctune inside the root, with the root's build folders mounted over its build*
# folders: the host's own build/ is never touched. The mounts live in a private mount namespace
# and vanish when the script ends. Logs: $CTUNE_TRIXIE_ROOT/logs/.
# Needs root (debootstrap, chroot, mount); it re-runs itself with sudo otherwise.
set -euo pipefail

die() { echo "check_libtorch2: $*" >&2; exit 1; }

TREE=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${CTUNE_TRIXIE_ROOT:-/var/cache/ctune-trixie}
MIRROR=${CTUNE_TRIXIE_MIRROR:-http://deb.debian.org/debian}
CUDA=${CUDA:-0}
MODE=$([ "$CUDA" = 1 ] && echo cuda || echo cpu)
ROOT=$CACHE/$MODE
LOGS=$CACHE/logs
JOBS=${CTUNE_JOBS:-$(nproc)}
T0=$(date +%s)

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "needs root (debootstrap, chroot, mount) and there is no sudo"
  exec sudo --preserve-env=CTUNE_TRIXIE_ROOT,CTUNE_TRIXIE_MIRROR,CUDA,CTUNE_JOBS,CTUNE_TEST_JOBS,CTUNE_SKIP_ASAN,CTUNE_SKIP_THIRD_PARTY bash "$0" "$@"
fi
case "$CACHE/" in "$TREE"/*) die "CTUNE_TRIXIE_ROOT ($CACHE) must be outside the working tree ($TREE)" ;; esac
mkdir -p "$LOGS"

say() { echo "[check_libtorch2 +$(($(date +%s) - T0))s] $*"; }

# Runs one step with its output in $LOGS/<name>.log. A failure ends the script with the log's
# tail and, last, one line naming the step and its log.
step() {
  local name=$1
  shift
  say "$name"
  if ! "$@" >"$LOGS/$name.log" 2>&1; then
    tail -25 "$LOGS/$name.log" >&2
    die "$name failed (log: $LOGS/$name.log)"
  fi
}

# A command inside a root: a clean environment (the host's PATH and locale mean nothing there),
# passing on only the knobs of the build and test scripts.
in_root() {
  local root=$1
  shift
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CTUNE_JOBS="$JOBS" CTUNE_TEST_JOBS="${CTUNE_TEST_JOBS:-2}" \
    CTUNE_SKIP_ASAN="${CTUNE_SKIP_ASAN:-1}" CTUNE_SKIP_THIRD_PARTY="${CTUNE_SKIP_THIRD_PARTY:-1}" \
    bash -c "$*"
}

# The mounts a root needs to run the build and the tests, in this process's own mount namespace
# (see the end of the script): /proc, /dev (Chromium needs /dev/shm), /sys, the host's DNS (apt,
# and npm for the tokenizer tests), the tree at /ctune and the root's build folders over its build*.
mount_root() {
  local root=$1 d
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --rbind /sys "$root/sys"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  mkdir -p "$root/ctune"
  mount --bind "$TREE" "$root/ctune"
  for d in build build-asan build-vendored; do
    # A mount point must exist; build* is ignored by git, so an empty folder in the tree is harmless.
    mkdir -p "$root/var/lib/ctune-build/$d" "$TREE/$d"
    mount --bind "$root/var/lib/ctune-build/$d" "$root/ctune/$d"
  done
}

# Undoes mount_root, before a finished root is renamed into place.
umount_root() {
  local root=$1
  umount -R "$root/ctune" "$root/sys" "$root/dev" "$root/proc"
}

# Every mount below happens in a private mount namespace: nothing outlives the script, and a
# failure leaves no bind mount of the tree behind.
if [ "${CTUNE_TRIXIE_NAMESPACE:-}" != 1 ]; then
  command -v unshare >/dev/null || die "unshare (util-linux) is missing"
  CTUNE_TRIXIE_NAMESPACE=1 exec unshare --mount --propagation private bash "$0" "$@"
fi

# --- The trixie root (once) ---------------------------------------------------------------------

# Debian 12's debootstrap knows trixie, and Debian 12's archive keyring has trixie's keys.
if ! command -v debootstrap >/dev/null; then
  step host-debootstrap bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap"
fi

# A root is made under <name>.partial and renamed when complete, so an interrupted run starts that
# root again. Removing a partial root is safe: the tree is bind-mounted into it only inside the
# namespace of the run that mounted it, and that run is over.
make_cpu_root() {
  local tmp=$CACHE/cpu.partial
  rm -rf "$tmp"
  step debootstrap debootstrap --variant=minbase --components=main,contrib,non-free \
    --include=ca-certificates trixie "$tmp" "$MIRROR"
  cat >"$tmp/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: trixie
Components: main contrib non-free
EOF
  rm -f "$tmp/etc/apt/sources.list"
  # The project's own dependency list, run inside the root: it installs libtorch-dev 2.6 there.
  mount_root "$tmp"
  step root-deps in_root "$tmp" "apt-get update -qq && bash /ctune/scripts/install-deps.sh"
  umount_root "$tmp"
  mv "$tmp" "$ROOT"
}

# The CUDA root: the CPU root plus the CUDA LibTorch (contrib) and the CUDA toolkit it was built
# with (non-free). A copy, so the CPU root stays as it is.
make_cuda_root() {
  local tmp=$CACHE/cuda.partial
  [ -d "$CACHE/cpu" ] || die "the CUDA root is made from the CPU root: run without CUDA=1 first"
  rm -rf "$tmp"
  step copy-root cp -a --reflink=auto "$CACHE/cpu" "$tmp"
  rm -rf "$tmp/var/lib/ctune-build"
  mount_root "$tmp"
  say root-cuda
  # libtorch-cuda-2.6 depends on nvidia-cudnn (contrib), an installer that downloads cuDNN from
  # NVIDIA when it is configured: a machine that reaches only Debian's archive cannot finish it.
  if ! in_root "$tmp" "apt-get update -qq && apt-get install -y -qq --no-install-recommends libtorch-cuda-dev nvidia-cuda-toolkit" \
    >"$LOGS/root-cuda.log" 2>&1; then
    grep -q "Could not resolve host: developer.download.nvidia.com" "$LOGS/root-cuda.log" &&
      die "nvidia-cudnn (needed by libtorch-cuda-2.6) downloads cuDNN from developer.download.nvidia.com, which this machine cannot reach (log: $LOGS/root-cuda.log)"
    tail -25 "$LOGS/root-cuda.log" >&2
    die "root-cuda failed (log: $LOGS/root-cuda.log)"
  fi
  umount_root "$tmp"
  mv "$tmp" "$ROOT"
}

if [ ! -d "$ROOT" ]; then
  if [ "$MODE" = cuda ]; then make_cuda_root; else make_cpu_root; fi
fi
mount_root "$ROOT"
torch_package=$([ "$MODE" = cuda ] && echo libtorch-cuda-dev || echo libtorch-dev)
say "root: $ROOT ($torch_package $(in_root "$ROOT" "dpkg-query -W -f='\${Version}' $torch_package"))"

# A command given on the command line runs in the root instead of the checks below.
if [ $# -gt 0 ]; then
  in_root "$ROOT" "$*"
  exit
fi

# --- Build and test ------------------------------------------------------------------------------

summary() {
  local log=$1
  grep -E "tests passed|tests failed" "$log" | tail -1 || true
  grep -cE "\*\*\*Skipped|Not Run" "$log" | sed 's/^/skipped or not run: /' || true
}

if [ "$MODE" = cpu ]; then
  # The README's test command. Its AddressSanitizer and vendored-prefix parts build only the
  # torch-free readers and pin Debian 12's packages (third_party/deps.lock), so they say nothing
  # about LibTorch 2.x and are skipped unless CTUNE_SKIP_ASAN=0 / CTUNE_SKIP_THIRD_PARTY=0.
  start=$(date +%s)
  status=0
  in_root "$ROOT" "cd /ctune && bash scripts/test.sh" >"$LOGS/test.log" 2>&1 || status=$?
  say "scripts/test.sh on LibTorch 2.6 (CPU): exit $status, $(($(date +%s) - start)) s wall (log: $LOGS/test.log)"
  summary "$LOGS/test.log"
  [ "$status" -eq 0 ] || { grep -A40 "The following tests FAILED" "$LOGS/test.log" | head -40 >&2; die "scripts/test.sh failed on LibTorch 2.6 (log: $LOGS/test.log)"; }
else
  start=$(date +%s)
  step cuda-build in_root "$ROOT" "cd /ctune && CTUNE_TARGETS='ctune test_cuda' bash scripts/build.sh build"
  say "ctune and test_cuda built and linked: $(($(date +%s) - start)) s wall"
  grep -q "CTUNE_WITH_CUDA" "$ROOT/var/lib/ctune-build/build/compile_commands.json" ||
    die "the build did not define CTUNE_WITH_CUDA: CMake found no CUDA LibTorch (log: $LOGS/cuda-build.log)"
  step cuda-help in_root "$ROOT" "/ctune/build/bin/ctune --help"
  step cuda-ldd in_root "$ROOT" "ldd /ctune/build/bin/ctune"
  grep -E "libc10_cuda|libtorch_cuda" "$LOGS/cuda-ldd.log" | sed 's/^/  /'
  grep -q "libtorch_cuda" "$LOGS/cuda-ldd.log" || die "ctune does not load libtorch_cuda (log: $LOGS/cuda-ldd.log)"
  # No GPU here: every CUDA test must skip with its reason, none may fail.
  step cuda-test in_root "$ROOT" "cd /ctune/build && ctest -R Cuda --output-on-failure"
  summary "$LOGS/cuda-test.log"
  grep -m1 -i "no GPU" "$LOGS/cuda-test.log" | sed 's/^/  /' || true
fi
say "done in $(($(date +%s) - T0)) s"
