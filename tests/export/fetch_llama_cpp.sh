#!/usr/bin/env bash
# Fixture step: installs node-llama-cpp 3.22.1 (llama.cpp with a prebuilt CPU backend) into a
# cache directory (argument 1) for the GGUF conformance tests; argument 2 names another version
# (scripts/bench_decode.sh installs the same version into a cache of its own). Skips everything when the cache is
# complete, so only the first run needs the network. On x86-64 Linux only the linux-x64 backend
# is installed (--omit=optional skips the CUDA/Vulkan/other-platform builds: 83 MB instead of
# 730 MB); elsewhere npm picks the platform's prebuilt package itself.
set -euo pipefail
cache=${1:?usage: fetch_llama_cpp.sh CACHE_DIR [VERSION]}
version=${2:-3.22.1}
cache=$(realpath -m "$cache")  # the steps below change directory
if [[ -f "$cache/.complete-$version" ]]; then
  echo "node-llama-cpp $version ready in $cache"
  exit 0
fi
partial="$cache.partial-$$"
rm -rf "$partial"
mkdir -p "$partial"
cd "$partial"
echo '{"private": true}' > package.json
if [[ "$(uname -s)-$(uname -m)" == "Linux-x86_64" ]]; then
  npm install --silent --no-audit --no-fund --omit=optional -E "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version"
else
  npm install --silent --no-audit --no-fund -E "node-llama-cpp@$version"
fi
touch ".complete-$version"
cd /
rm -rf "$cache"
mkdir -p "$(dirname "$cache")"
mv "$partial" "$cache"
echo "node-llama-cpp $version installed in $cache"
