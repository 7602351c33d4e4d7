# Sourced by the benchmarks (bench.sh, bench_decode.sh): a neighbour process beside a measured
# command, so each workload is measured alone and beside it (docs/performance.md, "Beside a
# neighbour"). NEIGHBOURS names them, comma-separated:
#   busy0   one CPU-bound loop at the same priority (nice 0), in this session: the scheduler
#           shares the cores per thread, so a 2-thread ctune on 2 cores is owed two thirds
#   busy0s  the same in another session (setsid: another terminal, another user's job, CI): with
#           autogroups (sched_autogroup_enabled, on by default) sessions share the cores evenly,
#           so ctune is owed half
#   busy19  one CPU-bound loop at nice 19
#   mixed   one loop at nice 10 and one at nice 19 spinning in the kernel (dd of single bytes):
#           issue 69's test workload
#   ctune   a second ctune doing the same work in a loop: the caller defines neighbour_ctune,
#           which prints that loop's shell command
# start_neighbour NAME starts one (its own process group) and waits a second for it to run;
# stop_neighbour ends the whole group. An EXIT trap ends one left running.
neighbour_pid=
start_neighbour() {
  local what
  case $1 in
    busy0 | busy0s) what='while :; do :; done' ;;
    busy19) what='nice -n 19 sh -c "while :; do :; done"' ;;
    mixed) what='nice -n 10 sh -c "while :; do :; done" & nice -n 19 dd if=/dev/zero of=/dev/null bs=1 2>/dev/null & wait' ;;
    ctune) what=$(neighbour_ctune) ;;
    *) echo "NEIGHBOURS: no neighbour \"$1\" (busy0, busy0s, busy19, mixed, ctune)" >&2; exit 2 ;;
  esac
  if [[ $1 == busy0s ]]; then
    setsid sh -c "$what" &  # a session of its own, and so a process group of its own
    neighbour_pid=$!
  else
    # Its own process group (ended whole) in this session: a nice value does not reach across
    # sessions, so a nice 19 neighbour started with setsid would take a fair half.
    set -m
    sh -c "$what" &
    neighbour_pid=$!
    set +m
  fi
  sleep 1  # the neighbour running (ctune: loaded) before the measured command starts
}
stop_neighbour() {
  [[ -n $neighbour_pid ]] || return 0
  kill -- -"$neighbour_pid" 2>/dev/null || true
  wait "$neighbour_pid" 2>/dev/null || true
  neighbour_pid=
}
trap stop_neighbour EXIT
