#!/usr/bin/env python3
"""Writes testdata/salt-3008.5/master_opts.json: every option a Salt 3008.5 master knows,
with its default, from the reference itself.

The options are the keys of `salt.config.DEFAULT_MASTER_OPTS`, plus the `cluster_*`
options Salt's cluster code reads with a default of its own (`opts.get("cluster_...", d)`)
without listing them there. Defaults that are not JSON (tuples, paths computed at import)
are written as JSON's nearest value or their `str()`. A few defaults are computed from the
machine that runs this (`user`, `ssh_user`, `ssh_config_file`: the running user;
`ipc_write_buffer`: its memory); Halite's table marks none of them as fixed at Salt's
default except `user`, which it compares with the user running Halite instead.

`other_valid_options` lists the options `salt.config.VALID_OPTS` knows that have no
master default (a minion's, salt-ssh's), so Halite does not take them for typos.

Run with the reference's interpreter, outside Salt's package directory:
    $HALITE_SALT_VENV/bin/python scripts/salt-master-opts.py > testdata/salt-3008.5/master_opts.json
(`scripts/setup-reference.sh` makes the venv.) `halite-master`'s `config_keys` tests fail
when an option here is missing from Halite's table.
"""
import collections.abc
import json
import pathlib
import re
import sys

import salt.config
import salt.version

assert salt.version.__version__.startswith("3008.5"), salt.version.__version__

opts = dict(salt.config.DEFAULT_MASTER_OPTS)
pkg = pathlib.Path(salt.config.__file__).resolve().parent.parent
read = re.compile(r"""opts\.get\(\s*["'](cluster_[a-z_]+)["']\s*,\s*([^)]+)\)""")
for path in sorted(pkg.rglob("*.py")):
    for key, default in read.findall(path.read_text(errors="replace")):
        if key not in opts:
            opts[key] = json.loads(default.strip()) if re.fullmatch(r"-?[0-9.]+|true|false|null", default.strip()) else default.strip()



def plain(value):
    """JSON's nearest value for Salt's immutable containers and other objects."""
    if isinstance(value, collections.abc.Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset, collections.abc.Sequence)) and not isinstance(value, str):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


# Options Salt's validator knows with no master default (minion, proxy and salt-ssh
# options, and a few optional master ones): not typos, though a master does not read most.
others = sorted(k for k in salt.config.VALID_OPTS if k not in opts)
out = {
    "salt_version": salt.version.__version__,
    "options": {k: plain(opts[k]) for k in sorted(opts)},
    "other_valid_options": others,
}
json.dump(out, sys.stdout, indent=1, sort_keys=False)
sys.stdout.write("\n")
