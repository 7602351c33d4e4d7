#!/usr/bin/env bash
# Fixture step: fetches Hugging Face's JavaScript Jinja implementation (@huggingface/jinja, the
# engine transformers.js renders chat templates with) into a cache directory (argument 1) and
# unpacks it. Skips the download when it is already there. The version is pinned: the
# reference strings depend on it.
#   <cache>/huggingface-jinja-0.5.11/package/dist/index.js
set -euo pipefail
cache=${1:?usage: fetch_jinja.sh CACHE_DIR}
spec=@huggingface/jinja@0.5.11
base=huggingface-jinja-0.5.11
mkdir -p "$cache"
cd "$cache"
if [[ -f "$base/.complete" ]]; then
  exit 0
fi
if [[ ! -f "$base.tgz" ]]; then
  echo "fetching $spec"
  npm pack --silent "$spec" > /dev/null
fi
rm -rf "$base.partial"
mkdir -p "$base.partial"
tar -xzf "$base.tgz" -C "$base.partial"
touch "$base.partial/.complete"
rm -rf "$base"
mv "$base.partial" "$base"
echo "jinja ready in $cache"
