#!/usr/bin/env bash
# Installs the reference, Salt 3008.5 from PyPI, into a venv outside the clone
# ($HALITE_CACHE/venv-salt-3008.5, default ~/.cache/halite), for the compatibility tests
# (reading Halite's files with Salt's own code) and later a real salt-minion.
#
# Salt 3008.5 pins certifi>=2026.10.23, which the package index here lacks, so its
# requirements are installed without that line, then salt itself with --no-deps.
# The same venv holds salt-pepper (pinned), the salt-api client the salt-api end-to-end
# tests drive (tools/tests/e2e/saltapi_pepper.rs); a venv made before it is given it.
# pepper 0.7.6 imports pkg_resources, which setuptools 81 and later no longer ship: the
# venv's setuptools is pinned below that (salt is installed by then).
# Idempotent: a finished venv is marked and reused.
set -euo pipefail
cache="${HALITE_CACHE:-$HOME/.cache/halite}"
venv="$cache/venv-salt-3008.5"
pepper=(salt-pepper==0.7.6 setuptools==80.9.0)
if [ -f "$venv/.halite-ready" ]; then
  if [ ! -f "$venv/.halite-pepper-0.7.6" ]; then
    "$venv/bin/python" -m pip install -q "${pepper[@]}" >&2
    touch "$venv/.halite-pepper-0.7.6"
  fi
  echo "$venv"
  exit 0
fi
mkdir -p "$cache"
rm -rf "$venv"
python3 -m venv "$venv" >&2
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip wheel setuptools >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && "$py" -m pip download -q --no-deps salt==3008.5 >&2 && tar xzf salt-3008.5.tar.gz)
src="$work/salt-3008.5"
grep -hv '^\s*certifi' "$src/requirements/base.txt" "$src/requirements/zeromq.txt" | grep -v '^\s*-' > "$work/reqs.txt"
echo "certifi" >> "$work/reqs.txt"
echo "croniter" >> "$work/reqs.txt"
"$py" -m pip install -q -r "$work/reqs.txt" >&2
"$py" -m pip install -q --no-deps --no-build-isolation salt==3008.5 >&2
"$py" -c "import salt.version, salt.cache.mmap_key; assert salt.version.__version__.startswith('3008.5'), salt.version.__version__" >&2
"$py" -m pip install -q "${pepper[@]}" >&2
touch "$venv/.halite-pepper-0.7.6"
touch "$venv/.halite-ready"
echo "$venv"
