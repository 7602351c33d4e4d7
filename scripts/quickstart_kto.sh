#!/usr/bin/env bash
# The quickstart's KTO stage (recipes/quickstart/kto.yaml: the DPO stage's pairs unpaired) after
# scripts/quickstart.sh: scripts/quickstart_dpo.sh with STAGE=kto, which says what it prints.
set -euo pipefail
STAGE=kto exec bash "$(dirname "$0")/quickstart_dpo.sh"
