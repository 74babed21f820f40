#!/usr/bin/env bash
# Installs what `cargo build --features rocksdb` and the db_bench cross-check
# need: Debian's RocksDB 7.8.3 library and headers, libclang for bindgen, and
# rocksdb-tools (db_bench). Idempotent: does nothing when all are present.
#
#   scripts/setup-rocksdb.sh && cargo build --release -p tierkv-bench --features rocksdb
#
# The link settings (ROCKSDB_LIB_DIR, ROCKSDB_INCLUDE_DIR) are in
# .cargo/config.toml.
set -euo pipefail

packages=(librocksdb-dev libclang-dev rocksdb-tools clang)
missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "setup-rocksdb: ${packages[*]} already installed"
else
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    echo "setup-rocksdb: installing ${missing[*]}"
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
fi

if [ ! -e /usr/lib/x86_64-linux-gnu/librocksdb.so ] || [ ! -e /usr/include/rocksdb/c.h ]; then
    echo "setup-rocksdb: librocksdb.so or rocksdb/c.h not where .cargo/config.toml expects them" >&2
    exit 1
fi
version=$(dpkg-query -W -f='${Version}' librocksdb-dev)
echo "setup-rocksdb: librocksdb-dev $version, db_bench at $(command -v db_bench || echo '(missing)')"
