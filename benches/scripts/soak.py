#!/usr/bin/env python3
"""A memory soak: one Halite master, a swarm of simulated minions, a job at a steady rate.

The script starts a release ``salt-master`` on a fresh state directory with
``auto_accept: True``, signs in ``--minions`` simulated minions with ``halite-swarm``,
then runs ``salt '*' test.ping`` every ``--interval`` seconds for ``--minutes`` minutes.
Every ``--sample`` seconds it records the master's RSS and its anonymous part (from
``/proc/PID/smaps_rollup``) with the number of jobs run so far. At the end it checks that
every return was stored: ``salt-run jobs.lookup_jid`` for every job must list every
minion.

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/soak.py \\
        [--minions 1000] [--minutes 60] [--interval 1] [--distinct-keys 1000] [--out docs/bench-data/soak.json]

The one-hour soak the benchmark report names is the default; ``--minutes 10`` is the
shorter run. Release binaries are expected in $CARGO_TARGET_DIR/release (default
~/.cache/halite/target/release): ``cargo build --release -p halite-master -p halite-tools``.
Environment variables the script is started with reach the master (``MALLOC_ARENA_MAX``,
for instance). Every process started here is stopped by PID, children included. With
``--config "halite_health_port: N"`` each sample also records the state machine's RocksDB
memory by part (``halite_state_memory_bytes``: memtables, table readers, block cache).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import BIN, Master, rollup, stop, swarm_until_ready  # noqa: E402


def state_memory(port):
    """The master's `halite_state_memory_bytes` by part (MiB), from its health endpoint on
    127.0.0.1:`port` (`halite_health_port`); {} when it does not answer."""
    import urllib.request
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("halite_state_memory_bytes{part="):
            part = line.split('"')[1]
            out[part] = round(float(line.rsplit(" ", 1)[1]) / (1 << 20), 2)
    return out


def smaps(pid):
    """RSS and anonymous memory (KiB) of the process tree."""
    return rollup(pid, ("Rss", "Anonymous"))


def ping(m, timeout):
    """Runs one `salt '*' test.ping`; returns the number of True returns it printed."""
    out = subprocess.run(
        [os.path.join(BIN, "salt"), "-c", m.conf, "*", "test.ping", "--out", "json", "-t", str(timeout)],
        capture_output=True, text=True,
    )
    return out.stdout.count("true")


def job_ids(m):
    out = subprocess.run(
        [os.path.join(BIN, "salt-run"), "-c", m.conf, "jobs.list_jobs", "--out", "json"],
        capture_output=True, text=True,
    ).stdout
    try:
        return sorted(json.loads(out))
    except ValueError:
        return []


def stored_returns(m, jid):
    out = subprocess.run(
        [os.path.join(BIN, "salt-run"), "-c", m.conf, "jobs.lookup_jid", jid, "--out", "json"],
        capture_output=True, text=True,
    ).stdout
    try:
        return len(json.loads(out))
    except ValueError:
        return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minions", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--sample", type=float, default=10.0)
    # Below the kernel's ephemeral range (32768-60999 here), which other processes' client
    # sockets take ports from.
    ap.add_argument("--port", type=int, default=24506)
    ap.add_argument("--keys", default=os.path.expanduser("~/.cache/halite/swarm-keys"))
    ap.add_argument("--distinct-keys", type=int, default=1000,
                    help="key pairs the swarm uses (minion n takes key n mod K); the master's work is the same")
    ap.add_argument("--out", default="docs/bench-data/soak.json")
    ap.add_argument("--config", default="", help="extra master configuration lines (YAML), e.g. 'cluster_max_log_size: 5000'")
    args = ap.parse_args()

    # `--config "halite_health_port: N"`: each sample also reads the state machine's
    # memory by part from the master's /metrics.
    health = next((int(l.split(":", 1)[1]) for l in args.config.replace("\\n", "\n").splitlines() if l.strip().startswith("halite_health_port:")), None)
    root = tempfile.mkdtemp(prefix="soak-")
    m = Master("halite", root, args.port)
    if args.config:
        with open(os.path.join(m.conf, "master"), "a") as f:
            f.write(args.config.replace("\\n", "\n") + "\n")
    m.start()
    swarm, _auth, ready = swarm_until_ready(
        ["--port", str(args.port), "--count", str(args.minions), "--key-dir", args.keys, "--distinct-keys", str(args.distinct_keys),
         "--master-pid", str(m.proc.pid)], root
    )
    samples, jobs, short = [], 0, 0
    try:
        if ready.get("count") != args.minions:
            sys.exit(f"only {ready.get('count')} of {args.minions} minions ready")
        t0 = time.monotonic()
        next_job = next_sample = t0
        end = t0 + args.minutes * 60
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                rss, anon = smaps(m.proc.pid)
                samples.append({"s": round(now - t0, 1), "jobs": jobs, "rss_mib": round(rss / 1024, 1), "anon_mib": round(anon / 1024, 1)})
                if health:
                    samples[-1]["state_mib"] = state_memory(health)
                print(json.dumps(samples[-1]), flush=True)
                next_sample += args.sample
            if now >= next_job:
                got = ping(m, 60)
                jobs += 1
                if got != args.minions:
                    short += 1
                    print(f"  job {jobs}: {got}/{args.minions} returns within the CLI timeout", file=sys.stderr)
                next_job = max(next_job + args.interval, time.monotonic())
            time.sleep(max(0.0, min(next_job, next_sample) - time.monotonic()))
        time.sleep(5)
        jids = job_ids(m)
        missing = {j: n for j in jids if (n := stored_returns(m, j)) != args.minions}
        if len(jids) != jobs:
            missing["job count"] = f"{len(jids)} jobs in the job cache, {jobs} run"
    finally:
        stop(swarm)
        m.stop()
    after = [s for s in samples if s["s"] >= 60] or samples
    lo, hi = min(s["rss_mib"] for s in after), max(s["rss_mib"] for s in after)
    result = {
        "minions": args.minions,
        "minutes": args.minutes,
        "interval_s": args.interval,
        "jobs": jobs,
        "jobs_short_in_cli": short,
        "jobs_with_missing_returns": missing,
        "rss_after_warmup_min_mib": lo,
        "rss_after_warmup_max_mib": hi,
        "rss_spread_pct": round(100 * (hi - lo) / lo, 1),
        "env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
        "samples": samples,
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}))


if __name__ == "__main__":
    main()
