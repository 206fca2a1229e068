#!/usr/bin/env python3
"""The master against the machine's floor, alternated in one run: the ratios the summary
of docs/benchmarks.md gives for returns and `test.ping`.

Each round runs, in turn, the floor (`halite-bench floor`: a server that only frames
bytes, the same connections and message sizes), the master's blast (`returns.py`) and
its `test.ping` (`ping_cpu.py`), at N minions; the next round starts with the master.
This machine's speed moves by a quarter from one run to the next, so a ratio is taken
within a round (floor and master minutes apart), and the summary gives the rounds'
median and range:

- CPU a return: the master's CPU a return in the blast over the floor server's CPU a
  request in its blast (goal: 2x);
- `test.ping`: the master's median ping (CLI start to every return printed) over the
  floor's median ping (ask to last reply) (goal: 2x).

Each round also runs `halite-bench work`: the work a return needs beyond framing
(open, encode, log, apply, seal; inline on one thread, `--work-group` returns to a log
entry and one sync an entry, as the master syncs under a blast). The summary then
splits the master's CPU a return into the floor's, that work, and the rest (tasks,
queues, raft's bookkeeping, routing): the floor plus the work over the floor is the
ratio a master doing that work with nothing else would reach. And it runs
`halite-bench floor --work` (the design): the floor's server with each request a real
return carrying that work on its connection's task, one log thread committing them,
at the master's message sizes; the floor in that round is run at the same sizes, and
the design over it is the leanest master measured.

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/floor_ratio.py BINDIR \
        [--rounds 3] [--minions 8000] [--per-minion 5] [--pings 5] [--work-group G] [--port P] [--out FILE.jsonl]
    floor_ratio.py BINDIR --out FILE.jsonl --summarize     # the summary of runs in FILE

BINDIR holds `salt-master`, `salt`, `salt-run`, `halite-swarm` and `halite-bench` (a
release build's `target/release`). Each run's JSON line is appended to `--out` as
`{"round", "kind", "r"}` (kind `floor`, `floor_sized`, `design`, `work`, `blast` or `ping`); the summary goes to stdout.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def run(cmd, port):
    """The JSON lines a command printed (the floor prints one a shape)."""
    env = dict(os.environ, HALITE_BENCH_PORT=str(port))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env).stdout.strip().splitlines()
    return [json.loads(line) for line in out if line.startswith("{")]


def spread(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def summary(rows):
    rounds = sorted({r["round"] for r in rows})
    cpu, ping, lines, best, rest, designs = [], [], [], [], [], []
    for n in rounds:
        got = {r["kind"]: r["r"] for r in rows if r["round"] == n}
        floor = got.get("floor") or {}
        blast, fping = floor.get("blast"), floor.get("ping")
        if blast and got.get("blast", {}).get("master_cpu_us_per_return"):
            m, f = got["blast"]["master_cpu_us_per_return"], blast["server_cpu_us_per_request"]
            cpu.append(m / f)
            lines.append(f"round {n}: CPU a return {m} us, floor {f} us a request: {m / f:.2f}x")
            design, dfloor = got.get("design", {}).get("blast"), got.get("floor_sized", {}).get("blast")
            if design and dfloor:
                d, g = design["server_cpu_us_per_request"], dfloor["server_cpu_us_per_request"]
                designs.append(d / g)
                lines.append(f"round {n}: the design {d} us a return, the floor at its sizes {g} us: {d / g:.2f}x")
            w = got.get("work", {}).get("total_us")
            if w:
                best.append((f + w) / f)
                rest.append(m - f - w)
                steps = ", ".join(f"{k[:-3]} {v}" for k, v in got["work"].items() if k.endswith("_us") and k != "total_us")
                lines.append(f"round {n}: the work a return needs {w} us ({steps}); floor + work {(f + w) / f:.2f}x the floor; the rest {m - f - w:.1f} us")
        if fping and got.get("ping", {}).get("ping_median_s"):
            m, f = got["ping"]["ping_median_s"], fping["median_s"]
            ping.append(m / f)
            lines.append(f"round {n}: test.ping {m:.3f} s, floor {f:.3f} s: {m / f:.2f}x")
    if cpu:
        lines.append(f"CPU a return over the floor's CPU a request: {spread(cpu)}x over {len(cpu)} rounds")
    if designs:
        lines.append(f"the design (floor --work) over the floor at its sizes: {spread(designs)}x")
    if best:
        lines.append(f"floor + work over the floor: {spread(best)}x; the rest of the master's CPU a return: {spread(rest)} us")
    if ping:
        lines.append(f"test.ping over the floor's ping: {spread(ping)}x over {len(ping)} rounds")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--minions", type=int, default=8000)
    ap.add_argument("--per-minion", type=int, default=5)
    ap.add_argument("--pings", type=int, default=5)
    ap.add_argument("--work-group", type=int, default=55, help="returns to a log entry for `halite-bench work` (a blast at 8,000: about 55 a sync)")
    ap.add_argument("--port", type=int, default=25506, help="the master's publish port (the request port is the next)")
    ap.add_argument("--out", default="")
    ap.add_argument("--summarize", action="store_true", help="only summarize the runs already in --out")
    a = ap.parse_args()
    if a.summarize:
        print(summary([json.loads(line) for line in open(a.out) if line.strip()]))
        return
    b = a.bin
    floor = [os.path.join(b, "halite-bench"), "floor", "--conns", str(a.minions), "--rounds", "5", "--blast", str(a.per_minion)]
    blast = [PY, os.path.join(HERE, "returns.py"), "--sizes", str(a.minions), "--per-minion", str(a.per_minion), "--bin", b, "--port", str(a.port)]
    ping = [PY, os.path.join(HERE, "ping_cpu.py"), str(a.minions), b, str(a.pings)]
    sized = ["--request-bytes", "584", "--reply-bytes", "99"]  # a salt-minion test.ping return and its reply
    design = floor + ["--work"]
    floor_sized = floor + sized
    work = [os.path.join(b, "halite-bench"), "work", "--returns", "200000", "--minions", str(a.minions), "--group", str(a.work_group), "--entries-per-sync", "1"]
    rows = []
    for n in range(a.rounds):
        steps = [("floor", floor), ("floor_sized", floor_sized), ("design", design), ("work", work), ("blast", blast), ("ping", ping)]
        for kind, cmd in steps if n % 2 == 0 else steps[1:] + steps[:1]:
            out = run(cmd, a.port)
            if not out:
                print(f"  round {n} {kind}: no result", file=sys.stderr)
                continue
            r = {o["floor"]: o for o in out} if kind in ("floor", "floor_sized", "design") else out[-1]
            rows.append({"round": n, "kind": kind, "r": r})
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
    print(summary(rows))


if __name__ == "__main__":
    main()
