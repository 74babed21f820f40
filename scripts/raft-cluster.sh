#!/usr/bin/env bash
# Starts a 3-node tierkv-raft cluster on 127.0.0.1 in one command: builds the
# binary, starts nodes 1..3 on ports BASE+1..BASE+3, forms the cluster the
# way an operator does (init node 1, add 2 and 3 as learners, promote all
# three to voters) and keeps it in the foreground; Ctrl-C stops every node.
#
#   bash scripts/raft-cluster.sh                    # classic (SSD WAL, synced)
#   bash scripts/raft-cluster.sh --store triangle   # PM design, PM WAL under /dev/shm
#   bash scripts/raft-cluster.sh --store rocksdb    # needs FEATURES=rocksdb
#
# Environment: BASE_PORT (21000), DIR (/tmp/tierkv-raft-cluster), PM_DIR
# (/dev/shm/tierkv-raft-cluster), FEATURES (e.g. rocksdb). Further flags go
# to `tierkv-raft cluster` (see --help). Data from an earlier run is removed.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_PORT=${BASE_PORT:-21000}
DIR=${DIR:-/tmp/tierkv-raft-cluster}
PM_DIR=${PM_DIR:-/dev/shm/tierkv-raft-cluster}
features=()
if [ -n "${FEATURES:-}" ]; then features=(--features "tierkv-raft/${FEATURES}"); fi

cargo build --release -p tierkv-raft "${features[@]}"
rm -rf "$DIR" "$PM_DIR"
exec target/release/tierkv-raft cluster --base-port "$BASE_PORT" --dir "$DIR" --pm-dir "$PM_DIR" "$@"
