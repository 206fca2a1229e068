#!/usr/bin/env python3
"""A publish's own cost at N simulated minions: the master's CPU-seconds and the CLI's
wall time for each `salt --async '*' test.ping`, with no returns in the window.

The swarm runs with `--blast 1000`: every minion receives and decrypts each publish and
holds the job instead of answering, so what the master spends in the window is the
publish alone (the admin verb, the target's expected minions, the commit, the fan-out
to every subscriber). Prints one JSON line.

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/publish_cpu.py N BINDIR [PUBLISHES]

BINDIR holds `salt-master`, `salt` and `halite-swarm`. With `HALITE_PERF_OUT=FILE`,
`perf record` samples the master over the publishes; with `HALITE_PERF_STAT_OUT=FILE`,
`perf stat` counts its threads (`swarm.PERF_STAT_EVENTS`). The master runs on a fresh
state directory under /tmp and is stopped by PID with the swarm.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
from swarm import HOME, Master, stop  # noqa: E402

n = int(sys.argv[1]); swarm.BIN = sys.argv[2]; count = int(sys.argv[3]) if len(sys.argv) > 3 else 8
root = tempfile.mkdtemp(prefix="publish-")
port = int(os.environ.get("HALITE_BENCH_PORT", "29906"))
m = Master("halite", root, port)
m.start()
sw = subprocess.Popen([os.path.join(swarm.BIN, "halite-swarm"), "--auth-timeout", "60", "--port", str(port), "--count", str(n),
                       "--key-dir", os.path.join(HOME, ".cache/halite/swarm-keys"), "--distinct-keys", "1000", "--blast", "1000"],
                      stdout=subprocess.PIPE, stderr=open(os.path.join(root, "swarm.log"), "w"), text=True)
try:
    for line in sw.stdout:
        if json.loads(line)["event"] == "ready":
            break
    time.sleep(2)
    perf = swarm.perf_start(m.proc.pid)
    walls = []
    c0 = swarm.cpu([m.proc.pid])
    for _ in range(count):
        t0 = time.monotonic()
        subprocess.run([os.path.join(swarm.BIN, "salt"), "-c", m.conf, "*", "test.ping", "--async"], capture_output=True)
        walls.append(time.monotonic() - t0)
        # Room for the fan-out to finish before the next publish.
        time.sleep(1.0)
    cpu = (swarm.cpu([m.proc.pid]) - c0) / count
    swarm.perf_stop(perf)
finally:
    stop(sw)
    m.stop()
print(json.dumps({"bin": swarm.BIN, "n": n, "publishes": count, "cli_wall_s": [round(w, 3) for w in walls],
                  "cli_wall_median_s": round(statistics.median(walls), 3), "master_cpu_s_per_publish": round(cpu, 3)}))
