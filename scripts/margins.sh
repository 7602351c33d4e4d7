#!/usr/bin/env bash
# Prints the tightest tolerance margins a test run recorded (tests/support/margins.h): for each
# test, its largest measured / tolerance (or floor / measured for lower bounds), the ten largest
# first. 1.0 or more fails. Usage: scripts/margins.sh MARGINS_DIR [COUNT]
set -euo pipefail
dir=$1
count=${2:-10}
shopt -s nullglob
files=("$dir"/margins-*.tsv)
if [ ${#files[@]} -eq 0 ]; then
  echo "margins: no records in $dir"
  exit 0
fi
echo "== The $count tightest tolerance margins of this run (measured / tolerance; 1.0 fails; docs/testing.md)"
# No `head` in the pipeline: with pipefail, a reader that stops early can kill a writer with
# SIGPIPE and turn a green run's exit status into 141. awk counts instead and reads to the end.
cat "${files[@]}" | sort -t $'\t' -k1,1gr |
  awk -F '\t' -v n="$count" '!seen[$2]++ && shown++ < n { printf "  %6.3f  %s\n          %s: measured %s, %s %s\n", $1, $2, $3, $4, $5, $6 }'
