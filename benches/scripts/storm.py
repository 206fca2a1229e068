#!/usr/bin/env python3
"""A restart storm served FIFO and fair: a lone Halite master restarted with a new
publish key (``halite_new_publish_key_at_start: True``, as Salt makes one at every start)
under N ``halite-swarm`` minions, then a job published to all of them: each minion finds
the publish undecryptable, signs in again and returns the job, all at once. The same
storm with ``halite_request_fifo: True`` (one queue in arrival order) and without (each
class of request with its share, ``master/src/daemon/request_port/shares.rs``),
alternated ``--pairs`` times.

For each run:

1. a fresh master (release build, ``auto_accept``), the swarm signs in and subscribes;
2. SIGTERM, start again on the same state; once every subscription is back
   (``halite_minions_connected``), ``salt '*' test.ping --async``;
3. from that publish: when the last minion signed in again (its ``signed_in_again``
   line), when the swarm's ``job`` line came (every minion's return acknowledged or
   given up: acknowledged means committed), how many returned and how many failed
   (a return that timed out three times), and the returns stored
   (``jobs.lookup_jid``);
4. every 0.5 s the master's ``halite_auths_total{result="accepted"}`` and
   ``halite_returns_total`` (per-class service over time), its RSA private-key
   operations, the sign-ins answered without RSA and the queued requests dropped
   because their minion had gone (``peer_gone``).

The swarm uses salt-minion's defaults (``auth_timeout`` 5 s, ``auth_tries`` 7; a return
waits 10 s, three tries). Release binaries in $CARGO_TARGET_DIR/release. Every process
started here is stopped by PID, children included.

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/storm.py --minions 8000 --pairs 3 --out docs/bench-data/storm-8k.jsonl

``--swarm-args`` passes salt-minion's options to the swarm (``--auth-timeout``,
``--auth-tries``, ``--acceptance-wait``, ``--random-reauth-delay``); ``--modes fair``
runs one mode only.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import BIN, HOME, Master, stop  # noqa: E402
from restart import connected  # noqa: E402


def sample(text, name):
    """The sum of a metric's samples whose name and labels start with `name`."""
    total = 0.0
    for line in (text or "").splitlines():
        if line.startswith(name):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return total


def metrics_slow(health, timeout=5):
    """The master's `/metrics`, waiting up to `timeout` (a master busy with a storm
    answers late); None if unreadable."""
    import urllib.request

    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{health}/metrics", timeout=timeout).read().decode()
    except OSError:
        return None


def counters(health):
    """The counters sampled, or None when the endpoint did not answer."""
    t = metrics_slow(health)
    if t is None:
        return None
    return {
        "signed_in": sample(t, 'halite_auths_total{result="accepted"}'),
        "returns": sample(t, "halite_returns_total"),
        "rsa": sample(t, "halite_rsa_private_operations_total"),
        "reused": sample(t, "halite_signin_reused_total"),
        "peer_gone": sample(t, 'halite_refused_total{port="request",reason="peer_gone"}'),
        "waiting_sign_in": sample(t, 'halite_request_waiting{class="sign_in"}'),
        "waiting_return": sample(t, 'halite_request_waiting{class="return"}'),
    }


def counters_now(health):
    """The counters, asked again until the master answers."""
    c = None
    while c is None:
        c = counters(health)
    return c


def sample_until(done, health, base, p0, give_up):
    """The counters every 0.5 s, less `base` (the queue depths as they are), each stamped
    with when its answer came (a busy master answers late), until done() or `give_up`
    seconds after `p0`."""
    series = []
    while not done() and time.monotonic() < p0 + give_up:
        asked = time.monotonic()
        c = counters(health)
        if c is not None:
            series.append({"t": round(time.monotonic() - p0, 1), **{k: round(v - base[k]) if not k.startswith("waiting") else round(v) for k, v in c.items()}})
        time.sleep(max(0.0, 0.5 - (time.monotonic() - asked)))
    return series


def start_master(prefix, mode, port, extra=""):
    """A Halite master in a new directory: its health endpoint on port + 3, its request
    port's queues one FIFO (`mode` fifo) or fair shares, `extra` config lines.
    Returns the directory, the master and the health port."""
    root = tempfile.mkdtemp(prefix=prefix)
    m = Master("halite", root, port)
    health = port + 3
    with open(os.path.join(m.conf, "master"), "a") as f:
        f.write(f"halite_health_port: {health}\n{extra}")
        f.write(f"halite_request_fifo: {'True' if mode == 'fifo' else 'False'}\n")
    m.start()
    return root, m, health


def run_one(mode, n, port, keydir, distinct, give_up, swarm_args=()):
    root, m, health = start_master(f"storm-{mode}-{n}-", mode, port, "halite_new_publish_key_at_start: True\n")
    swarm = subprocess.Popen(
        [os.path.join(BIN, "halite-swarm"), "--port", str(port), "--count", str(n), "--key-dir", keydir, "--distinct-keys", str(distinct)] + list(swarm_args),
        stdout=subprocess.PIPE, stderr=open(os.path.join(root, "swarm.log"), "w"), text=True,
    )
    again, jobs, ready = [], {}, threading.Event()

    def read():
        for line in swarm.stdout:
            ev = json.loads(line)
            if ev["event"] == "signed_in_again":
                again.append(time.monotonic())
            elif ev["event"] == "job":
                jobs[ev["jid"]] = (time.monotonic(), ev)
            elif ev["event"] == "ready":
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    row = {"mode": mode, "minions": n, "swarm_args": " ".join(swarm_args)}
    try:
        if not ready.wait(1800):
            sys.exit("the swarm was not ready after 30 min")
        m.stop()
        m.start()
        t0 = time.monotonic()
        while (connected(health) or 0) < n and time.monotonic() < t0 + 300:
            time.sleep(0.1)
        row["subscribed_again_s"] = round(time.monotonic() - t0, 2)
        base = counters_now(health)
        again.clear()
        out = subprocess.run([os.path.join(BIN, "salt"), "-c", m.conf, "*", "test.ping", "--async"], capture_output=True, text=True).stdout
        jid = re.search(r"\b\d{20}\b", out).group(0)
        p0 = time.monotonic()
        series = sample_until(lambda: jid in jobs, health, base, p0, give_up)
        if jid not in jobs:
            row["gave_up_s"] = give_up
            return row
        done_at, job = jobs[jid]
        row["all_returned_s"] = round(done_at - p0, 2)
        row["swarm_job_s"] = round(job["seconds"], 2)
        row["returned"], row["failed"] = job["returned"], job["failed"]
        row["signed_in_again"] = len(again)
        row["all_signed_in_s"] = round(max(again) - p0, 2) if again else None
        end = counters_now(health)
        row.update({k: round(end[k] - base[k]) for k in ("rsa", "reused", "peer_gone")})
        stored = subprocess.run([os.path.join(BIN, "salt-run"), "-c", m.conf, "jobs.lookup_jid", jid, "--out", "json"], capture_output=True, text=True).stdout
        try:
            row["stored"] = len(json.loads(stored))
        except ValueError:
            row["stored"] = None
        row["series"] = series
    finally:
        stop(swarm)
        m.stop()
    return row


def run_mixed(mode, n, port, keydir, distinct, give_up, returners=2000, per_minion=3):
    """A blast of returns and a storm of first sign-ins at once: `returners` minions
    (ids ``ret-*``), signed in, each hold `per_minion` jobs and then send all their
    returns together (``--blast``), while `n` new minions (``new-*``) sign in for the first
    time. Reports the blast (returns acknowledged, seconds from its go to the last
    acknowledgement) and the storm (seconds until the last accept)."""
    root, m, health = start_master(f"storm-mixed-{mode}-{n}-", mode, port)
    swarm = os.path.join(BIN, "halite-swarm")
    common = ["--port", str(port), "--key-dir", keydir, "--distinct-keys", str(distinct)]
    lines = {"a": [], "b": []}
    procs = []

    def spawn(tag, args):
        p = subprocess.Popen([swarm] + common + args, stdout=subprocess.PIPE, stderr=open(os.path.join(root, f"swarm-{tag}.log"), "w"), text=True)
        procs.append(p)

        def read():
            for line in p.stdout:
                lines[tag].append((time.monotonic(), json.loads(line)))

        threading.Thread(target=read, daemon=True).start()

    def event(tag, name):
        return next((e for _, e in lines[tag] if e["event"] == name), None)

    def wait(tag, name, secs):
        t = time.monotonic()
        while event(tag, name) is None and time.monotonic() < t + secs:
            time.sleep(0.05)
        return event(tag, name)

    row = {"scenario": "mixed", "mode": mode, "signing_in": n, "returners": returners, "per_minion": per_minion}
    try:
        spawn("a", ["--count", str(returners), "--prefix", "ret-", "--blast", str(per_minion)])
        if wait("a", "ready", 1800) is None:
            sys.exit("the returning swarm was not ready")
        while (connected(health) or 0) < returners:
            time.sleep(0.1)
        base = counters_now(health)
        # The storm: new minions, their keys loaded from the cache, then all sign in.
        spawn("b", ["--count", str(n), "--prefix", "new-", "--jobs", "0"])
        if wait("b", "keys", 600) is None:
            sys.exit("the signing-in swarm made no keys")
        p0 = time.monotonic()
        # The blast goes once every returning minion holds its jobs.
        for _ in range(per_minion):
            subprocess.run([os.path.join(BIN, "salt"), "-c", m.conf, "ret-*", "test.ping", "--async"], capture_output=True, text=True)
        series = sample_until(lambda: event("a", "blast") is not None and event("b", "authenticated") is not None, health, base, p0, give_up)
        blast, auth = event("a", "blast"), event("b", "authenticated")
        row["blast"] = {k: blast.get(k) for k in ("acknowledged", "failed", "seconds", "returns_per_s")} if blast else None
        row["blast_done_s"] = round(next(t for t, e in lines["a"] if e["event"] == "blast") - p0, 2) if blast else None
        row["sign_in"] = {k: auth.get(k) for k in ("count", "failed", "seconds", "retried")} if auth else None
        row["sign_in_done_s"] = round(next(t for t, e in lines["b"] if e["event"] == "authenticated") - p0, 2) if auth else None
        row["series"] = series
    finally:
        for p in procs:
            stop(p)
        m.stop()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minions", type=int, default=8000)
    ap.add_argument("--pairs", type=int, default=3, help="FIFO and fair runs, alternated")
    ap.add_argument("--keys", default=os.path.join(HOME, ".cache/halite/swarm-keys"))
    ap.add_argument("--distinct-keys", type=int, default=1000)
    ap.add_argument("--give-up", type=int, default=600, help="seconds after the publish")
    ap.add_argument("--out", default="docs/bench-data/storm.jsonl")
    ap.add_argument("--modes", default="fifo,fair", help="the modes alternated in each pair")
    ap.add_argument("--scenario", choices=["restart", "mixed"], default="restart",
                    help="restart: the restart storm above; mixed: a blast of returns from --returners signed-in minions while --minions new ones sign in")
    ap.add_argument("--returners", type=int, default=2000)
    ap.add_argument("--per-minion", type=int, default=3, help="returns each returning minion holds and then sends (mixed)")
    ap.add_argument("--swarm-args", default="", help="extra halite-swarm options, e.g. '--auth-timeout 60' (salt-minion's auth_timeout)")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    port = 31506
    with open(a.out, "a") as f:
        for i in range(a.pairs):
            modes = a.modes.split(",")
            for mode in modes if i % 2 == 0 else modes[::-1]:
                port += 10
                if a.scenario == "mixed":
                    row = run_mixed(mode, a.minions, port, a.keys, a.distinct_keys, a.give_up, a.returners, a.per_minion)
                else:
                    row = run_one(mode, a.minions, port, a.keys, a.distinct_keys, a.give_up, a.swarm_args.split())
                row["date"] = time.strftime("%Y-%m-%dT%H:%M:%S")
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps({k: v for k, v in row.items() if k != "series"}), flush=True)


if __name__ == "__main__":
    main()
