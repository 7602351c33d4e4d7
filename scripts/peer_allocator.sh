# Sourced by the benchmarks that time a PyTorch peer (scripts/bench.sh, scripts/bench_decode.sh):
# sets TCMALLOC to the path of libtcmalloc_minimal.so.4, which they preload into the peer.
# PyTorch's CPU performance tuning guide advises tcmalloc: glibc's malloc gives a step's large
# blocks back to the kernel and faults them in again on the next one, which on some of these
# machines cost the lean training peer 38% of its CPU time in the kernel and two thirds of its
# speed, and on others little, so a ratio against a glibc peer measures the machine (docs/performance.md,
# "The peers' allocator"). ctune needs no preload: it pools its tensors (src/ops/tensor_pool.cpp).
#   TCMALLOC=PATH  that library;  TCMALLOC=  (empty) glibc's malloc, with a line saying so.
# $1: the script's name for its messages. A path that does not exist is refused (exit 2): ld.so
# would only warn and run the peer on glibc while the table said tcmalloc.
TCMALLOC=${TCMALLOC-$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | awk '/libtcmalloc_minimal\.so\.4 /{p = $NF} END {print p}')}
[[ -n $TCMALLOC ]] || echo "$1: no libtcmalloc_minimal.so.4 (apt install libtcmalloc-minimal4): the peers run on glibc's malloc" >&2
if [[ -n $TCMALLOC && ! -f $TCMALLOC ]]; then
  echo "$1: TCMALLOC=$TCMALLOC: no such file (expected the path of libtcmalloc_minimal.so.4, or empty for glibc's malloc)" >&2
  exit 2
fi
