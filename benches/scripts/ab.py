#!/usr/bin/env python3
"""Two builds, alternated: the blast (`returns.py`) and `test.ping` (`ping_cpu.py`) at N
minions, run in turn for each build, PAIRS times, then medians and ranges.

This machine's speed moves by a quarter from one run to the next (other guests on the
host), so a comparison of builds is only worth the alternation: run A, run B, run A...
and compare medians, never one run against another.

Each summary line also gives the master's CPU divided by the swarm's in the same window
("÷ swarm"). The swarm does a fixed amount of work a return or a ping whatever the
master's build (when both builds share one swarm), so its CPU is a clock of the
machine's speed during that run. In the runs kept so far the ratio's spread was a third
to a half of the raw CPU's for `test.ping`, about half for the blast (docs/benchmarks.md,
the introduction). It is a proxy: a master that answers faster can let
the swarm handle more events a wake-up, which moves the swarm's CPU a little too.

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/ab.py BINDIR_A BINDIR_B \
        [--pairs 4] [--minions 8000] [--per-minion 5] [--out FILE.jsonl]
    ab.py A B --out FILE.jsonl --summarize     # the summary of runs already in FILE

BINDIR_A and BINDIR_B each hold `salt-master`, `salt`, `salt-run` and `halite-swarm`
(to compare masters alone, give both the same swarm and CLI). Each run's JSON line is
appended to `--out` as `{"kind", "bin", "r"}`; the summary goes to stdout.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()
    return json.loads(out[-1]) if out else None


def summary(rows, kind, b):
    rs = [r["r"] for r in rows if r["kind"] == kind and r["bin"] == b]
    if not rs:
        return f"{kind} {b}: no runs"
    if kind == "blast":
        rate = [x["returns_per_s"] for x in rs]
        us = [x["master_cpu_us_per_return"] for x in rs]
        sw = [x["swarm_cpu_us_per_return"] for x in rs]
        return (f"blast {b}: {statistics.median(rate):.0f} returns/s ({min(rate):.0f}-{max(rate):.0f}), "
                f"master {statistics.median(us):.1f} us a return ({min(us)}-{max(us)}), swarm {statistics.median(sw):.1f} us, "
                f"÷ swarm {ratio(us, sw)}")
    ping = [x["ping_median_s"] for x in rs]
    cpu = [x["cpu_median_s"] for x in rs]
    sw = [x.get("swarm_cpu_median_s") or 0 for x in rs]
    rss = [x["rss_mib"] for x in rs]
    settled = [x["rss_settled_mib"] for x in rs if "rss_settled_mib" in x]
    return (f"ping  {b}: {statistics.median(ping):.3f} s ({min(ping)}-{max(ping)}), "
            f"master {statistics.median(cpu):.3f} CPU-s a ping ({min(cpu)}-{max(cpu)}), ÷ swarm {ratio(cpu, sw)}, "
            f"RSS {min(rss)}-{max(rss)} MiB" + (f", {min(settled)}-{max(settled)} MiB settled" if settled else ""))


def ratio(master, swarm):
    """The master's CPU over the swarm's, run by run: median (range)."""
    r = [m / s for m, s in zip(master, swarm) if s]
    return f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})" if r else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--minions", type=int, default=8000)
    ap.add_argument("--per-minion", type=int, default=5)
    ap.add_argument("--pings", type=int, default=8)
    ap.add_argument("--out", default="")
    ap.add_argument("--summarize", action="store_true", help="only summarize the runs already in --out")
    a = ap.parse_args()
    if a.summarize:
        rows = [json.loads(line) for line in open(a.out) if line.strip()]
        for r in rows:
            r.setdefault("bin", r.get("b"))  # ab-8k-fair-queue.jsonl names it "b"
        for kind in ("blast", "ping"):
            for b in (a.a, a.b):
                print(summary(rows, kind, b))
        return
    rows = []
    for _ in range(a.pairs):
        for b in (a.a, a.b):
            blast = run([PY, os.path.join(HERE, "returns.py"), "--sizes", str(a.minions), "--per-minion", str(a.per_minion), "--bin", b])
            ping = run([PY, os.path.join(HERE, "ping_cpu.py"), str(a.minions), b, str(a.pings)])
            for kind, r in (("blast", blast), ("ping", ping)):
                if r is None:
                    print(f"  {kind} with {b}: no result", file=sys.stderr)
                    continue
                rows.append({"kind": kind, "bin": b, "r": r})
                if a.out:
                    with open(a.out, "a") as f:
                        f.write(json.dumps(rows[-1]) + "\n")
    for kind in ("blast", "ping"):
        for b in (a.a, a.b):
            print(summary(rows, kind, b))


if __name__ == "__main__":
    main()
