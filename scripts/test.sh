#!/usr/bin/env bash
# Runs every test: installs the system packages and the reference Salt 3008.5 (venv),
# then the whole workspace's tests. The build cache lives outside the clone
# ($HALITE_CACHE/target, default ~/.cache/halite/target) so repeated runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
export HALITE_CACHE="${HALITE_CACHE:-$HOME/.cache/halite}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HALITE_CACHE/target}"
# The repository speaks of the product: no history of the work, no documents from
# outside it (each offending file:line is printed).
scripts/check-docs.sh
scripts/setup.sh
export HALITE_SALT_VENV="$(scripts/setup-reference.sh)"
# The end-to-end tests run every binary of the workspace (salt-master is in another
# package than the tests), so build them all first.
cargo build --workspace --bins --locked
cargo test --workspace --locked "$@"
# The patched zeromq crate (`patches/`, outside the workspace): upstream's tests and the
# patch's own (frame bounds, bounded sends), with its own lock file.
cargo test --manifest-path patches/zeromq/Cargo.toml --locked
