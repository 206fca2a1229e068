#!/usr/bin/env python3
"""A lone Halite master restarted under a connected `halite-swarm`: how long until every
minion answers `test.ping` again.

For each swarm size (default 2000, 8000) and each key mode this script:

1. starts the master (release build) on a fresh state directory with ``auto_accept``;
2. runs ``halite-swarm --count N``: every minion signs in, subscribes, answers;
3. checks that ``salt '*' test.ping`` reaches all N, then stops the master (SIGTERM)
   and starts it again on the same state;
4. times from the master listening again (a clear ``ping`` answered on ``ret_port``)
   to the end of the first ``salt '*' test.ping -t T`` run that all N answer (runs
   repeat back to back until one does; ``--timeout`` T, default 3 s: a run that misses
   a minion lasts all of T, so T is the resolution), and counts the swarm's
   ``signed_in_again`` lines (minions the master made sign in again);
5. meanwhile samples the master's ``halite_minions_connected`` (health endpoint, every
   0.1 s): when half, 90 % and all of the subscriptions were back.

``--first-ping when-subscribed`` starts the first ping run only once every subscription
is back (a publish reaches only the minions subscribed when it is sent), so the figure
is not rounded up to the first run's timeout: it is when the master had every
minion connected again plus how long the first complete ping took.

Key modes: ``kept`` (Halite's default: the publish key survives the restart) and
``new`` (``halite_new_publish_key_at_start: True``: a new key at every start, as Salt
does, so every minion must sign in again when the first publish does not decrypt).

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/restart.py \
        [--sizes 2000,8000] [--modes kept,new] [--out docs/bench-data/restart.json]

Release binaries in $CARGO_TARGET_DIR/release (``cargo build --release -p halite-master
-p halite-tools``). Every process started here is stopped by PID, children included.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import BIN, HOME, Master, ping_count, rollup, stop, sweep, until_all_answer  # noqa: E402


def answering(m, timeout=3):
    return ping_count(os.path.join(BIN, "salt"), m.conf, timeout)


def metrics_text(health):
    """The master's `/metrics` (None if unreadable)."""
    import urllib.request

    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{health}/metrics", timeout=1).read().decode()
    except OSError:
        return None


def connected(health):
    """`halite_minions_connected` from the master's health endpoint (None if unreadable)."""
    lines = (metrics_text(health) or "").splitlines()
    return next((int(float(l.split()[1])) for l in lines if l.startswith("halite_minions_connected ")), None)


def refused(health):
    """Connections the master closed at once to keep descriptors for its own files."""
    text = metrics_text(health)
    if text is None:
        return None
    return sum(int(float(l.split()[-1])) for l in text.splitlines() if l.startswith("halite_refused_total") and "too_many_connections" in l)


def watch_connections(health, n, since, out, stop_at):
    """Records in `out` the seconds after `since` at which half, 90 % and all of the `n`
    subscriptions were back (sampled every 0.1 s)."""
    marks = {"half": n // 2, "p90": (9 * n) // 10, "all": n}
    while time.monotonic() < stop_at and len(out) < len(marks):
        c = connected(health) or 0
        for k, v in marks.items():
            if k not in out and c >= v:
                out[k] = round(time.monotonic() - since, 2)
        time.sleep(0.1)


def run_one(n, mode, port, keydir, distinct, timeout, extra="", first_ping="at-once"):
    root = tempfile.mkdtemp(prefix=f"restart-{mode}-{n}-")
    m = Master("halite", root, port)
    health = port + 3
    with open(os.path.join(m.conf, "master"), "a") as f:
        f.write(f"halite_health_port: {health}\n")
        if mode == "new":
            f.write("halite_new_publish_key_at_start: True\n")
        f.write(extra)
    m.start()
    swarm = subprocess.Popen(
        [os.path.join(BIN, "halite-swarm"), "--auth-timeout", "60", "--port", str(port), "--count", str(n), "--key-dir", keydir]
        + (["--distinct-keys", str(distinct)] if distinct else []),
        stdout=subprocess.PIPE, stderr=open(os.path.join(root, "swarm.log"), "w"), text=True,
    )
    events = {"signed_in_again": 0}
    ready = threading.Event()

    def read():
        for line in swarm.stdout:
            ev = json.loads(line)
            if ev["event"] == "signed_in_again":
                events["signed_in_again"] += 1
            else:
                events[ev["event"]] = ev
            if ev["event"] == "ready":
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    row = {"minions": n, "key": mode}
    try:
        if not ready.wait(1800):
            sys.exit("the swarm was not ready after 30 min")
        row["ready"] = events["ready"]["count"]
        got = answering(m, 60)
        if got != n:
            print(f"  warning: {got}/{n} answered before the restart", file=sys.stderr)
        m.stop()
        before = events["signed_in_again"]
        row["start_to_listening_s"] = m.start()
        t0 = time.monotonic()
        back = {}
        watcher = threading.Thread(target=watch_connections, args=(health, n, t0, back, t0 + 600), daemon=True)
        watcher.start()
        trace = []
        if first_ping == "when-subscribed":
            while "all" not in back and time.monotonic() < t0 + 120:
                time.sleep(0.02)
            row["first_ping_at_s"] = round(time.monotonic() - t0, 2)
        row["first_ping"] = first_ping
        seconds, runs, got = until_all_answer(lambda: answering(m, timeout), n, trace=trace)
        row["ping_run_detail"] = trace
        if got != n:
            row["answering_at_give_up"] = got
        row["listening_to_all_answering_s"] = seconds if first_ping == "at-once" else round(time.monotonic() - t0, 2)
        row["ping_runs"] = runs
        row["ping_timeout_s"] = timeout
        row["signed_in_again"] = events["signed_in_again"] - before
        watcher.join(5)
        row["listening_to_subscriptions_back_s"] = back
        row["refused_too_many_connections"] = refused(health)
        row["master_rss_mib_after"] = round(rollup(m.proc.pid, ("Rss",))[0] / 1024, 1)
    finally:
        stop(swarm)
        m.stop()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2000,8000")
    ap.add_argument("--modes", default="kept,new")
    ap.add_argument("--keys", default=os.path.join(HOME, ".cache/halite/swarm-keys"))
    ap.add_argument("--out", default="docs/bench-data/restart.json")
    ap.add_argument("--distinct-keys", type=int, default=1000, help="key pairs the swarm uses (0: one per minion)")
    ap.add_argument("--timeout", type=int, default=3,
                    help="each ping run's -t: a run that misses a minion lasts all of it, so this is the figure's resolution")
    ap.add_argument("--first-ping", choices=["at-once", "when-subscribed"], default="at-once",
                    help="start the first ping run as soon as the master listens, or once every subscription is back")
    ap.add_argument("--config", default="", help="extra master configuration lines (YAML), e.g. 'zmq_backlog: 4096'")
    a = ap.parse_args()
    extra = a.config.replace("\\n", "\n") + "\n" if a.config else ""
    sweep(a.sizes, a.modes, 29506, lambda n, mode, port: run_one(n, mode, port, a.keys, a.distinct_keys, a.timeout, extra, a.first_ping), a.out)


if __name__ == "__main__":
    main()
