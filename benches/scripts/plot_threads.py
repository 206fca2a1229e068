#!/usr/bin/env python3
"""The master's CPU by thread, from `perf stat --per-thread` files (the scripts'
``HALITE_PERF_STAT_OUT``), as microseconds per unit of work: a bar a thread role, a
colour a file. Prints the table and draws docs/img/threads.png.

    HALITE_PERF_STAT_OUT=BLAST.txt returns.py --sizes 8000 --per-minion 5 --bin BINDIR --masters halite --runs 1
    HALITE_PERF_STAT_OUT=PING.txt ping_cpu.py 8000 BINDIR 5
    ~/.cache/halite/venv-plot/bin/python benches/scripts/plot_threads.py \
        "blast, per return=BLAST.txt:40000" "test.ping, per minion and ping=PING.txt:40000" [--out PNG]

Each source is LABEL=FILE:UNITS (UNITS: the returns, or minions times pings, in the
window). Thread roles, by the names the master gives its threads: `salt-master` (the
main thread: the request port's reader), `raft-node-N` (the log: raft, the log's
appends and syncs, the state machine's applies), `tokio-rt-worker` (the two busiest are
the runtime's workers: handlers, replies, publishes; the others are the blocking pool),
`rocksdb:*` (RocksDB's flushes and compactions).
"""
import argparse
import collections
import re

ROLES = [
    "runtime workers (handlers, replies, publishes)",
    "main thread (request port reader)",
    "raft-node (raft, log, apply)",
    "blocking pool",
    "RocksDB background",
    "other",
]


def per_thread(path):
    """(name, tid, task-clock ms) of each thread with a count."""
    out = []
    for line in open(path):
        m = re.match(r"\s*(\S+)-(\d+)\s+([\d.,]+)\s+msec\s+task-clock", line)
        if m:
            out.append((m.group(1), int(m.group(2)), float(m.group(3).replace(",", ""))))
    return out


def roles(threads):
    """CPU ms by role."""
    by = collections.Counter()
    workers = sorted((t for t in threads if t[0] == "tokio-rt-worker"), key=lambda t: -t[2])
    main_tid = min((t[1] for t in threads if t[0] == "salt-master"), default=None)
    for name, tid, ms in threads:
        if name == "tokio-rt-worker":
            role = ROLES[0] if (name, tid, ms) in workers[:2] else ROLES[3]
        elif name == "salt-master" and tid == main_tid:
            role = ROLES[1]
        elif name.startswith("raft-node"):
            role = ROLES[2]
        elif name.startswith("rocksdb"):
            role = ROLES[4]
        else:
            role = ROLES[5]
        by[role] += ms
    return by


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src", nargs="+", help="LABEL=FILE:UNITS")
    ap.add_argument("--out", default="docs/img/threads.png")
    a = ap.parse_args()
    series = []
    for s in a.src:
        label, rest = s.split("=", 1)
        path, units = rest.rsplit(":", 1)
        by = roles(per_thread(path))
        us = {r: 1000.0 * by[r] / int(units) for r in ROLES}
        series.append((label, us))
        print(f"{label}: {sum(us.values()):.1f} us in all")
        for r in ROLES:
            print(f"  {us[r]:6.2f} us  {r}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in ROLES if any(us[r] > 0 for _, us in series)]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    height = 0.8 / len(series)
    for i, (label, us) in enumerate(series):
        ys = [k + i * height for k in range(len(shown))]
        ax.barh(ys, [us[r] for r in shown], height=height, label=label)
    ax.set_yticks([k + height * (len(series) - 1) / 2 for k in range(len(shown))])
    ax.set_yticklabels(shown)
    ax.invert_yaxis()
    ax.set_xlabel("master CPU, µs (perf stat task-clock)")
    ax.set_title("The master's CPU by thread at 8,000 minions")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
