#!/usr/bin/env bash
# The test command of the README (and of CI): installs what the tests need
# from the system (idempotent), then runs the whole suite.
#   - the engine and bench tests always run;
#   - the RocksDB side of the bench is tested when librocksdb-dev is present
#     (scripts/setup-rocksdb.sh installs it; set TIERKV_NO_ROCKSDB=1 to skip);
#   - built with the `ci` profile (Cargo.toml): release optimisation without
#     LTO, so the ~40 test binaries link quickly (a fresh build 2.5 min
#     instead of ~9; the tests themselves run as fast);
#   - `cargo fmt --check` first: unformatted code fails the suite.
set -euo pipefail
cd "$(dirname "$0")/.."

features=()
if [ -z "${TIERKV_NO_ROCKSDB:-}" ]; then
  if bash scripts/setup-rocksdb.sh; then
    features=(--features tierkv-bench/rocksdb)
  else
    echo "test.sh: librocksdb-dev unavailable; testing without the RocksDB engine" >&2
  fi
fi

# Formatting is part of the suite (rustfmt ships with rustup's default
# profile; a toolchain without it skips the check and says so).
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all --check
  # The fuzz targets live outside the workspace (cargo-fuzz's own crate).
  rustfmt --check --edition 2021 fuzz/fuzz_targets/*.rs
else
  echo "test.sh: rustfmt unavailable; formatting not checked" >&2
fi

cargo test --workspace --profile ci "${features[@]}"
