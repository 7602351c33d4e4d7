#!/usr/bin/env bash
# Fills third_party/prefix with every dependency ctune builds against except LibTorch, for a
# machine that has a compiler, CMake and a LibTorch (a PyTorch installation) but not these
# packages, nor apt or a network (the GPU machine, docs/gpu.md). Run it where apt works; the
# folder then travels with the source tree. Build with it: cmake -DCTUNE_THIRD_PARTY=ON.
# The packages and their checksums are pinned in third_party/deps.lock (Debian 12, amd64):
# each .deb is fetched with `apt-get download`, checked against its sha256 and unpacked with
# dpkg-deb, not installed. Already-fetched files in $DEBS are reused (offline after the first run).
#   bash scripts/vendor_deps.sh                 # into third_party/prefix
#   PREFIX=/tmp/p bash scripts/vendor_deps.sh   # somewhere else
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=third_party/deps.lock
PREFIX=${PREFIX:-third_party/prefix}
DEBS=${DEBS:-third_party/debs}
mkdir -p "$DEBS"
DEBS=$(cd "$DEBS" && pwd)

rm -rf "$PREFIX"
mkdir -p "$PREFIX"
count=0
while read -r name version sha; do
  [[ -z $name || $name == \#* ]] && continue
  file=$(ls "$DEBS/${name}_"*.deb 2>/dev/null | head -1 || true)
  if [[ -z $file ]] || ! echo "$sha  $file" | sha256sum --quiet -c - 2>/dev/null; then
    rm -f "$DEBS/${name}_"*.deb
    (cd "$DEBS" && apt-get download -q "$name=$version" >/dev/null 2>&1) || {
      echo "vendor_deps: cannot download $name $version with apt-get (is this Debian 12 with its apt sources?)" >&2
      exit 1
    }
    file=$(ls "$DEBS/${name}_"*.deb | head -1)
  fi
  if ! echo "$sha  $file" | sha256sum --quiet -c - 2>/dev/null; then
    echo "vendor_deps: $file: sha256 is $(sha256sum "$file" | cut -d' ' -f1), deps.lock pins $sha" >&2
    exit 1
  fi
  dpkg-deb -x "$file" "$PREFIX"
  count=$((count + 1))
done <"$LOCK"
rm -rf "$PREFIX/usr/share/doc" "$PREFIX/usr/share/man"  # not needed to build; keeps the folder small to carry
echo "vendor_deps: $count packages unpacked into $PREFIX ($(du -sh "$PREFIX" | cut -f1))"
