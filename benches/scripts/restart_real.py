#!/usr/bin/env python3
"""A master restarted under real salt-minion 3008.5 processes: how long until every
minion answers `test.ping` again.

For each variant this script starts the master (release Halite, or the reference) on a
fresh state directory with ``auto_accept``, starts ``--minions`` real salt-minion
processes from the reference venv with Salt's default timings (``acceptance_wait_time``
10 s, ``random_reauth_delay`` 10 s, ``auth_timeout`` 5 s, ``recon_default`` 1 s ...;
``--minion-extra`` adds lines), waits until all answer, restarts the master (SIGTERM,
then a start on the same state) and times from the master answering a clear ``ping``
again to the end of the first ``salt '*' test.ping -t T`` that every minion answers (runs
repeat back to back; a run that misses a minion lasts its whole ``T``, so ``T`` is the
resolution). It also counts the minions that signed in again (their log's
"Decrypting the current master AES key" lines, at debug, after the restart).

Variants: ``halite`` (the publish key is kept across the restart), ``halite-new-key``
(``halite_new_publish_key_at_start: True``: a new key at every start, as Salt makes one)
and ``reference`` (salt-master 3008.5).

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/restart_real.py \\
        [--minions 30] [--variants halite,halite-new-key,reference] [--out docs/bench-data/restart-real.json]

Every process started here is stopped: the master by PID (children included), each
minion by its own process group.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import BIN, VENV, Master, ping_count, until_all_answer  # noqa: E402

SIGNED_IN = "Decrypting the current master AES key"  # logged at debug once per sign-in


def start_minion(root, i, port, extra):
    d = os.path.join(root, f"m{i}")
    os.makedirs(os.path.join(d, "conf"), exist_ok=True)
    with open(os.path.join(d, "conf", "minion"), "w") as f:
        f.write(
            f"id: real-{i}\nmaster: 127.0.0.1\nmaster_port: {port}\nroot_dir: {d}\npki_dir: {d}/pki\ncachedir: {d}/cache\n"
            f"sock_dir: {d}/sock\npidfile: {d}/minion.pid\nlog_file: {d}/minion.log\nlog_level_logfile: debug\nuser: root\n"
            f"enable_fqdns_grains: False\n{extra}"
        )
    out = open(os.path.join(d, "out.log"), "w")
    return subprocess.Popen([os.path.join(VENV, "bin/salt-minion"), "-c", os.path.join(d, "conf")],
                            stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_minions(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait()


def answering(m, timeout):
    return ping_count(os.path.join(BIN, "salt") if m.kind == "halite" else os.path.join(VENV, "bin/salt"), m.conf, timeout)


def sign_ins(root, n):
    total = 0
    for i in range(n):
        try:
            total += open(os.path.join(root, f"m{i}", "minion.log")).read().count(SIGNED_IN)
        except OSError:
            pass
    return total


def run_one(variant, n, port, extra, timeout):
    root = tempfile.mkdtemp(prefix=f"restart-real-{variant}-")
    m = Master("reference" if variant == "reference" else "halite", root, port)
    if variant == "halite-new-key":
        with open(os.path.join(m.conf, "master"), "a") as f:
            f.write("halite_new_publish_key_at_start: True\n")
    m.start()
    minions = [start_minion(root, i, port, extra) for i in range(n)]
    row = {"variant": variant, "minions": n, "minion_extra": extra, "ping_timeout_s": timeout}
    try:
        t0 = time.monotonic()
        while answering(m, 10) != n:
            if time.monotonic() - t0 > 600:
                sys.exit(f"{variant}: not every minion answering after 10 min; see {root}")
        row["first_all_answering_s"] = round(time.monotonic() - t0, 1)
        before = sign_ins(root, n)
        m.stop()
        row["start_to_listening_s"] = round(m.start(), 2)
        row["listening_to_all_answering_s"], runs, got = until_all_answer(lambda: answering(m, timeout), n)
        row["ping_runs"] = runs
        row["answering"] = got
        time.sleep(1)
        row["signed_in_again"] = sign_ins(root, n) - before
    finally:
        stop_minions(minions)
        m.stop()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minions", type=int, default=30)
    ap.add_argument("--variants", default="halite,halite-new-key,reference")
    ap.add_argument("--minion-extra", default="", help="extra minion configuration lines (YAML), e.g. 'random_reauth_delay: 0'")
    ap.add_argument("--timeout", type=int, default=3, help="each ping run's -t (the figure's resolution)")
    ap.add_argument("--out", default="docs/bench-data/restart-real.json")
    a = ap.parse_args()
    rows = []
    port = 30506
    for v in a.variants.split(","):
        port += 10
        row = run_one(v, a.minions, port, a.minion_extra.replace("\\n", "\n") + "\n" if a.minion_extra else "", a.timeout)
        print(json.dumps(row), flush=True)
        rows.append(row)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
