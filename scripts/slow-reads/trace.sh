#!/bin/bash
# OUT=DIR scripts/slow-reads/trace.sh NAME CONFIG BENCHMARKS [extra bench args]
#
# Runs `tierkv-bench compare` on one configuration at `medium` (BENCHMARKS
# must start with fillrandom) and perf-records everything after the fill:
# switch events, sched_switch and a 500 Hz CPU clock, with dwarf stacks,
# stamped with CLOCK_MONOTONIC like the bench's --slow_reads_file. Writes
# DIR/NAME.{perf,slow,json,log}; then, in DIR:
#   attribute.py NAME [MIN_MS]   where the reads over MIN_MS (1) spent their time
#   disk-waits.py NAME           the readers' disk waits (D state) by duration
# Needs perf and a release build of tierkv-bench (B= to point at another).
set -u
name=$1; config=$2; benches=$3; shift 3
out=${OUT:-$PWD}
B=${B:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/tierkv-bench}
ctl=/tmp/pctl.$$; rm -f $ctl; mkfifo $ctl
rm -f $out/$name.slow
( while ! grep -q "^fillrandom   :.*micros/op" $out/$name.log 2>/dev/null; do sleep 0.2; done; echo enable > $ctl ) &
watcher=$!
exec 3<>$ctl
perf record -D -1 --control fifo:$ctl -k CLOCK_MONOTONIC --switch-events \
  -e sched:sched_switch -e cpu-clock/period=2000000/ --call-graph dwarf,4096 \
  -o $out/$name.perf -- $B compare --configs $config --benchmarks $benches --scale medium \
  --bytes_per_sync 1048576 --slow_reads_file $out/$name.slow --json $out/$name.json "$@" > $out/$name.log 2>&1
kill $watcher 2>/dev/null
rm -f $ctl
