#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/, each until it has used FUZZ_CPU_SECS
# of CPU time (default 3600: issue 15's "≥ 1 CPU-hour"), FUZZ_JOBS targets
# at a time (default 1), at nice 19, from and into the corpus in
# fuzz/corpus/<target>/. Prints one line per target: CPU seconds, wall
# seconds, executions, corpus files before → after, findings (new crash-,
# leak-, oom- or timeout- files under fuzz/artifacts/<target>/).
#
#   bash scripts/fuzz.sh                     # every target, one at a time
#   FUZZ_JOBS=2 bash scripts/fuzz.sh rowtable pm_wal
#
# Needs a nightly toolchain and cargo-fuzz (`rustup toolchain install
# nightly && cargo install cargo-fuzz`). The time limit is CPU time, not wall
# time, so a run may be paused for a benchmark and resumed:
#   kill -STOP $(cat fuzz/logs/*.pid)   ...   kill -CONT $(cat fuzz/logs/*.pid)
# (the unit timeout is a day, so a pause is not reported as a hang).
# Where the kernel groups processes by session (sched_autogroup_enabled = 1,
# as on Debian), nice 19 orders the fuzzers only among themselves: started
# from another shell they still take their session's share of the cores,
# so pause them for builds and test runs too, not only for benchmarks.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

all=(rowtable container_state page_alloc pm_wal rangetab nvcache tlsm
     wal_reader version_edit sst_reader block)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
cpu_limit=${FUZZ_CPU_SECS:-3600}
jobs=${FUZZ_JOBS:-1}
ticks=$(getconf CLK_TCK)

cargo +nightly fuzz build >/dev/null
bin=target/x86_64-unknown-linux-gnu/release
mkdir -p logs

findings() {
  find "artifacts/$1" -maxdepth 1 -type f \
    \( -name 'crash-*' -o -name 'leak-*' -o -name 'oom-*' -o -name 'timeout-*' \) \
    -newer "logs/$1.start" 2>/dev/null | wc -l
}

run_one() {
  local t=$1 pid used=0 start rc
  mkdir -p "corpus/$t" "artifacts/$t"
  local before
  before=$(find "corpus/$t" -type f | wc -l)
  touch "logs/$t.start"
  start=$(date +%s)
  nice -n 19 "$bin/$t" "corpus/$t" -artifact_prefix="artifacts/$t/" \
    -rss_limit_mb=4096 -timeout=86400 -report_slow_units=86400 \
    -print_final_stats=1 >"logs/$t.log" 2>&1 &
  pid=$!
  echo "$pid" >"logs/$t.pid"
  while kill -0 "$pid" 2>/dev/null; do
    used=$(awk -v t="$ticks" '{ printf "%d", ($14 + $15) / t }' "/proc/$pid/stat" 2>/dev/null || echo "$used")
    if [ "$used" -ge "$cpu_limit" ]; then
      kill -INT "$pid" 2>/dev/null || true
      break
    fi
    sleep 5
  done
  rc=0
  wait "$pid" || rc=$?
  rm -f "logs/$t.pid"
  local execs after found
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/$t.log" | tail -1)
  after=$(find "corpus/$t" -type f | wc -l)
  found=$(findings "$t")
  # libFuzzer exits 72 when interrupted (the CPU limit), 0 when it ends by
  # itself; anything else is a finding even without an artifact.
  if [ "$rc" -ne 72 ] && [ "$rc" -ne 0 ] && [ "$found" -eq 0 ]; then found="exit $rc"; fi
  printf '%-16s cpu %5d s  wall %5d s  executions %10s  corpus %5d -> %5d  findings %s\n' \
    "$t" "$used" "$(($(date +%s) - start))" "${execs:-?}" "$before" "$after" "$found"
}

running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait
