#!/usr/bin/env bash
# The crash, kill and corruption campaigns at scale (issue 15), one after
# another, each printing one summary line:
#
#   model       the model test (tierkv/tests/model.rs) with MODEL_OPS
#               operations per design and WAL placement, crashing the file
#               system and the PM region at one instant every ~25 operations
#   kill        KILLS kill -9 of a child writing synced and unsynced batches,
#               per design (tierkv/tests/crash.rs), each followed by a reopen
#               and a check of every acknowledged batch and of nothing else
#   soak        readers with snapshots and iterators against writers for
#               SOAK_SECS seconds per design (tierkv/tests/concurrency.rs)
#   corruption  every byte of every file and PM structure of a small
#               database per design, changed, truncated, zeroed by pages
#               (tierkv/tests/campaign.rs, TIERKV_CAMPAIGN=full)
#   manifest    the issue's experiment: every byte of the MANIFEST of a
#               3,200-key database (tierkv/tests/manifest_damage.rs)
#
# Usage:
#   bash scripts/campaigns.sh            # at scale: hours; run it alone on the machine
#   bash scripts/campaigns.sh --short    # the same campaigns, small: a few minutes
#   bash scripts/campaigns.sh model kill # only some campaigns
#
# Scale (environment, defaults at scale / with --short):
#   MODEL_OPS=1000000/20000  KILLS=100/3  SOAK_SECS=600/5
#   CORRUPTION=full/sampled  SOAK_DESIGNS=classic,vlsm,triangle,matrix,rangetab,tlsm,nvcache
#   MODEL_TESTS="classic_ssd_wal classic_pm_wal vlsm_ssd_wal triangle_pm_wal matrix_pm_wal
#                rangetab_pm_wal tlsm_full_lru nvcache"
# Logs: $LOG_DIR (default target/campaigns/<date>), one file per campaign.
# Exit status: 0 if every campaign passed.
set -uo pipefail
cd "$(dirname "$0")/.."

short=0
wanted=()
for a in "$@"; do
  case "$a" in
    --short) short=1 ;;
    model|kill|soak|corruption|manifest) wanted+=("$a") ;;
    *) echo "campaigns.sh: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
[ ${#wanted[@]} -eq 0 ] && wanted=(model kill soak corruption manifest)

if [ "$short" = 1 ]; then
  : "${MODEL_OPS:=20000}" "${KILLS:=3}" "${SOAK_SECS:=5}" "${CORRUPTION:=sampled}"
else
  : "${MODEL_OPS:=1000000}" "${KILLS:=100}" "${SOAK_SECS:=600}" "${CORRUPTION:=full}"
fi
: "${SOAK_DESIGNS:=classic,vlsm,triangle,matrix,rangetab,tlsm,nvcache}"
: "${MODEL_TESTS:=classic_ssd_wal classic_pm_wal vlsm_ssd_wal triangle_pm_wal matrix_pm_wal rangetab_pm_wal tlsm_full_lru nvcache}"
: "${LOG_DIR:=target/campaigns/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$LOG_DIR"

echo "campaigns: ${wanted[*]} (MODEL_OPS=$MODEL_OPS KILLS=$KILLS SOAK_SECS=$SOAK_SECS CORRUPTION=$CORRUPTION); logs in $LOG_DIR"
# The `ci` profile (Cargo.toml): optimised like release, without LTO, so
# the test binaries build in minutes; the tests run as fast.
echo "building the test binaries..."
if ! cargo test --profile ci -p tierkv --no-run > "$LOG_DIR/build.log" 2>&1; then
  echo "campaigns: the build failed, see $LOG_DIR/build.log"
  exit 1
fi

failed=0

# run NAME ENV... -- CARGO-TEST-ARGS...: runs one campaign, prints its
# SUMMARY lines (or where its log is when it failed) and the time it took.
run() {
  local name="$1"; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local log="$LOG_DIR/$name.log" start end
  start=$(date +%s)
  env "${envs[@]}" cargo test --profile ci -p tierkv "$@" > "$log" 2>&1
  local status=$?
  end=$(date +%s)
  # (The test harness may print a summary on its own "test ... " line.)
  grep -ho 'SUMMARY .*' "$log" | sed 's/^SUMMARY /  /; s/ *ok$//'
  if [ $status -eq 0 ]; then
    echo "$name: passed in $((end - start)) s"
  else
    echo "$name: FAILED after $((end - start)) s (exit $status): see $log"
    failed=1
  fi
}

for c in "${wanted[@]}"; do
  case "$c" in
    model)
      # shellcheck disable=SC2086
      run model TIERKV_MODEL_OPS="$MODEL_OPS" -- \
        --test model -- --exact $MODEL_TESTS --nocapture --test-threads=1 ;;
    kill)
      run kill TIERKV_KILL_CYCLES="$KILLS" -- \
        --test crash -- kill_ --nocapture --test-threads=1 ;;
    soak)
      run soak TIERKV_SOAK_SECS="$SOAK_SECS" TIERKV_SOAK_DESIGNS="$SOAK_DESIGNS" -- \
        --test concurrency -- --exact soak_readers_and_writers --nocapture ;;
    corruption)
      mode=()
      [ "$CORRUPTION" = full ] && mode=(TIERKV_CAMPAIGN=full)
      run corruption "${mode[@]}" -- \
        --test campaign -- --nocapture --test-threads=1 ;;
    manifest)
      run manifest -- \
        --test manifest_damage -- --nocapture --test-threads=1 ;;
  esac
done

if [ $failed = 0 ]; then
  echo "campaigns: all passed"
else
  echo "campaigns: some FAILED"
fi
exit $failed
