#!/usr/bin/env bash
# System packages Halite builds against: Debian's librocksdb-dev (7.8.3; the rocksdb
# crate 0.20.1 binds to it, instead of a 27-minute RocksDB build from source) and
# libclang for its bindgen step; HAProxy for the cluster-behind-a-load-balancer test; curl
# for the salt-api test; the openssl CLI (test certificates) and libpam0g with
# libpam-modules (pam_exec, for salt-api's eauth pam tests).
# Installs only what is missing.
set -euo pipefail
need=()
for p in librocksdb-dev libclang-dev clang libssl-dev pkg-config python3-venv haproxy curl openssl libpam0g libpam-modules; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${need[*]} (run: sudo apt-get install -y ${need[*]})" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
