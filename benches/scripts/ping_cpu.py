#!/usr/bin/env python3
"""The master's CPU-seconds and the wall time of each `salt '*' test.ping` at N simulated
minions (and the swarm's and the CLI's CPU-seconds beside them), for one build: an A/B of two builds is two runs of this script, alternated.

    ping_cpu.py N BINDIR [RUNS]

BINDIR holds `salt-master`, `salt` and `halite-swarm` (a release build's
`target/release`, or a copy of an older one). Prints one JSON line: sign-in wall and
master CPU, each ping's wall time and master CPU (utime + stime from /proc/PID/stat,
so the figure does not depend much on what else the machine runs), their medians, and
the master's RSS right after the last ping and again SETTLE_S seconds later. The master runs on a fresh state directory under /tmp and
is stopped by PID with the swarm.

With `HALITE_PERF_OUT=FILE`, `perf record` samples the master during the pings (not
the sign-in) into FILE; with `HALITE_PERF_STAT_OUT=FILE`, `perf stat` counts the
master's CPU, context switches and request-path syscalls per thread over the same
window (`swarm.PERF_STAT_EVENTS`).
"""
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
from swarm import HOME, Master, swarm_until_ready, stop  # noqa: E402

# Seconds after the last ping before the RSS is read again (`rss_settled_mib`).
SETTLE_S = 3

n = int(sys.argv[1]); bindir = sys.argv[2]; runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
swarm.BIN = bindir
root = tempfile.mkdtemp(prefix="ab-")
port = int(os.environ.get("HALITE_BENCH_PORT", "29706"))  # two runs at once need two ports
m = Master("halite", root, port)
m.start()
t0 = time.monotonic(); c0 = swarm.cpu([m.proc.pid])
sw, auth, ready = swarm_until_ready(["--port", str(port), "--count", str(n), "--key-dir", os.path.join(HOME, ".cache/halite/swarm-keys"), "--distinct-keys", "1000"], root)
signin = (time.monotonic() - t0, swarm.cpu([m.proc.pid]) - c0)
time.sleep(2)
perf = swarm.perf_start(m.proc.pid, freq=499, stack_bytes=16384)
pings = m.cli_ping_runs(n, runs, others=[sw.pid])
swarm.perf_stop(perf)
walls, cpus, swarm_cpus, cli_cpus = ([r[i] for r in pings] for i in range(4))
rss = swarm.rollup(m.proc.pid, ("Rss",))[0] / 1024
time.sleep(SETTLE_S)  # the master gives a burst's free pages back within about two seconds
rss_settled = swarm.rollup(m.proc.pid, ("Rss",))[0] / 1024
stop(sw); m.stop()
print(json.dumps({"bin": bindir, "n": n, "signin_s": round(signin[0], 2), "signin_cpu_s": round(signin[1], 2), "ping_s": [round(x, 3) for x in walls], "ping_cpu_s": [round(x, 3) for x in cpus], "ping_median_s": round(statistics.median(walls), 3), "cpu_median_s": round(statistics.median(cpus), 3), "swarm_cpu_median_s": round(statistics.median(swarm_cpus), 3), "cli_cpu_median_s": round(statistics.median(cli_cpus), 3), "rss_mib": round(rss, 1), "rss_settled_mib": round(rss_settled, 1), "swarm_auth": auth}))
