#!/usr/bin/env bash
# Runs the Halite master on its embedded default: a single node with every path under
# ./run (config: examples/master), listening on 4505/4506, logging to the terminal.
#
# In another terminal, with the same config dir:
#   salt-key -c run/conf -L          salt-key -c run/conf -a <id>
#   salt -c run/conf '*' test.ping   halite-ctl -c run/conf dump    (the last with the master stopped)
# (the binaries are in ${CARGO_TARGET_DIR:-~/.cache/halite/target}/release)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HALITE_CACHE:-$HOME/.cache/halite}/target}"
cargo build --release --locked -p halite-master -p halite-tools
root="$PWD/run"
mkdir -p "$root/conf"
sed "s|@ROOT@|$root|g" examples/master > "$root/conf/master"
echo "salt-master: config $root/conf, tools in $CARGO_TARGET_DIR/release" >&2
exec "$CARGO_TARGET_DIR/release/salt-master" -c "$root/conf" -l info
