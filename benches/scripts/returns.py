#!/usr/bin/env python3
"""Returns acknowledged per second by the master alone: `halite-swarm --blast N`.

For each master and swarm size this script:

1. starts the master on a fresh state directory with ``auto_accept: True``;
2. runs ``halite-swarm --count M --blast N``: every minion signs in and subscribes;
3. publishes N jobs with ``salt --async '*' test.ping``; each minion holds them and
   builds (encrypts) their N returns ahead of time instead of answering;
4. once every minion holds its N, the swarm sends them all at once (each minion its
   returns one after the other, one request outstanding a connection, as salt-minion)
   and reports the returns acknowledged, the seconds from the go to the last reply,
   and the CPU-seconds of the master's process tree and of the swarm in that window;
5. checks that the job cache holds every return of the last job
   (``salt-run jobs.lookup_jid``).

So the figure leaves out what the ordinary `job` lines include and a master does not
do: the swarm decrypting each publish and building and encrypting each return, on the
same cores. What remains of the swarm in the window (a send and a receive a return) is
reported beside the master's CPU.

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/returns.py \
        [--sizes 1000,8000] [--per-minion 5] [--masters halite,reference] [--runs 3] \
        [--bin DIR] [--out docs/bench-data/returns.json]

With ``HALITE_PERF_OUT=FILE`` (one size, one run), ``perf record`` samples the master
from the publishes to the end of the blast into FILE; with ``HALITE_PERF_STAT_OUT=FILE``,
``perf stat`` counts the master's CPU, context switches and request-path syscalls per
thread over the same window (``swarm.PERF_STAT_EVENTS``).

Release binaries in $CARGO_TARGET_DIR/release (or ``--bin``). Every process started
here is stopped by PID, children included.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
from swarm import HOME, VENV, Master, stop  # noqa: E402


def publish(m, n):
    """N `salt --async '*' test.ping`: the jids."""
    exe = os.path.join(swarm.BIN, "salt") if m.kind == "halite" else os.path.join(VENV, "bin/salt")
    jids = []
    for _ in range(n):
        out = subprocess.run([exe, "-c", m.conf, "*", "test.ping", "--async"], capture_output=True, text=True)
        found = re.search(r"(\d{20})", out.stdout + out.stderr)
        if not found:
            sys.exit(f"no jid from salt --async: {out.stdout} {out.stderr}")
        jids.append(found.group(1))
    return jids


def stored(m, jid):
    """How many returns the job cache holds for `jid`."""
    exe = os.path.join(swarm.BIN, "salt-run") if m.kind == "halite" else os.path.join(VENV, "bin/salt-run")
    out = subprocess.run([exe, "-c", m.conf, "jobs.lookup_jid", jid, "--out", "json"], capture_output=True, text=True).stdout
    try:
        data = json.loads(out)
    except ValueError:
        return None
    if isinstance(data, dict) and "data" in data and "outputter" in data:
        data = data["data"]
    return len(data) if isinstance(data, dict) else None


def proc_io(pid):
    """The master's `read`-family calls and bytes so far (/proc/PID/io: `syscr`, `rchar`;
    sockets are not counted there, so these are its files: the log read back, the state)."""
    with open(f"/proc/{pid}/io") as f:
        io = dict(line.split(": ") for line in f.read().splitlines() if line)
    return int(io["syscr"]), int(io["rchar"])


def run_one(kind, n, per, port, keydir, distinct):
    root = tempfile.mkdtemp(prefix=f"returns-{kind}-{n}-")
    m = Master(kind, root, port)
    m.start()
    row = {"master": kind, "minions": n, "per_minion": per}
    args = ["--port", str(port), "--count", str(n), "--key-dir", keydir, "--master-pid", str(m.proc.pid), "--blast", str(per)]
    if distinct:
        args += ["--distinct-keys", str(distinct)]
    sw = subprocess.Popen([os.path.join(swarm.BIN, "halite-swarm"), "--auth-timeout", "60"] + args,
                          stdout=subprocess.PIPE, stderr=open(os.path.join(root, "swarm.log"), "w"), text=True)
    try:
        for line in sw.stdout:
            ev = json.loads(line)
            if ev["event"] == "ready":
                break
        time.sleep(0.5)
        perf = swarm.perf_start(m.proc.pid)
        io_before = proc_io(m.proc.pid)
        jids = publish(m, per)
        blast = None
        for line in sw.stdout:
            ev = json.loads(line)
            if ev["event"] == "blast":
                blast = ev
                break
        swarm.perf_stop(perf)
        io_after = proc_io(m.proc.pid)
        row["master_file_reads"] = io_after[0] - io_before[0]
        row["master_file_read_bytes"] = io_after[1] - io_before[1]
        if not blast:
            sys.exit(f"no blast line; see {root}/swarm.log")
        row.update({k: blast[k] for k in ("acknowledged", "failed", "seconds", "returns_per_s", "master_cpu_seconds", "swarm_cpu_seconds")})
        if blast["acknowledged"]:
            row["master_cpu_us_per_return"] = round(1e6 * (blast["master_cpu_seconds"] or 0) / blast["acknowledged"], 1)
            row["swarm_cpu_us_per_return"] = round(1e6 * blast["swarm_cpu_seconds"] / blast["acknowledged"], 1)
        row["last_job_stored"] = stored(m, jids[-1])
    finally:
        stop(sw)
        m.stop()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,8000")
    ap.add_argument("--per-minion", type=int, default=5)
    ap.add_argument("--masters", default="halite")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--bin", default=swarm.BIN)
    ap.add_argument("--port", type=int, default=24506)
    ap.add_argument("--keys", default=os.path.join(HOME, ".cache/halite/swarm-keys"))
    ap.add_argument("--distinct-keys", type=int, default=1000)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    swarm.BIN = a.bin
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        for kind in a.masters.split(","):
            for _ in range(a.runs):
                row = run_one(kind, n, a.per_minion, a.port, a.keys, a.distinct_keys)
                print(json.dumps(row), flush=True)
                rows.append(row)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "bin": a.bin, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
