#!/usr/bin/env bash
# Runs Halite on its embedded default: a single node with every path under ./run.
#
# Until the single-master work lands (salt-master daemon), this runs the storage core
# end to end on an example: it imports a Salt 3008.5 pki tree (the reference vectors)
# into the log, migrates it to mmap_key, lists the keys with salt-key, verifies the log
# and dumps its records.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HALITE_CACHE:-$HOME/.cache/halite}/target}"
cargo build --release --locked -p halite-tools
bin="$CARGO_TARGET_DIR/release"
root="$PWD/run"
mkdir -p "$root/conf"
sed "s|@ROOT@|$root|g" examples/master > "$root/conf/master"
if [ ! -d "$root/pki/minions" ]; then
  mkdir -p "$root/pki"
  cp -r testdata/salt-3008.5/localfs_key/pki/. "$root/pki/"
  chmod -R u+w "$root/pki"
fi
set -x
"$bin/salt-key" -c "$root/conf" -L
"$bin/salt-run" -c "$root/conf" pki.migrate_to_mmap test=True
"$bin/salt-run" -c "$root/conf" pki.migrate_to_mmap
"$bin/halite-ctl" -c "$root/conf" verify --views
"$bin/halite-ctl" -c "$root/conf" dump
