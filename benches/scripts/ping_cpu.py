#!/usr/bin/env python3
"""The master's CPU-seconds and the wall time of each `salt '*' test.ping` at N simulated
minions, for one build: an A/B of two builds is two runs of this script, alternated.

    ping_cpu.py N BINDIR [RUNS]

BINDIR holds `salt-master`, `salt` and `halite-swarm` (a release build's
`target/release`, or a copy of an older one). Prints one JSON line: sign-in wall and
master CPU, each ping's wall time and master CPU (utime + stime from /proc/PID/stat,
so the figure does not depend much on what else the machine runs), their medians, and
the master's RSS afterwards. The master runs on a fresh state directory under /tmp and
is stopped by PID with the swarm.
"""
import os, sys, subprocess, tempfile, time, json, statistics
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm
from swarm import HOME, Master, swarm_until_ready, stop
n = int(sys.argv[1]); bindir = sys.argv[2]; runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
swarm.BIN = bindir
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
root = tempfile.mkdtemp(prefix="ab-")
m = Master("halite", root, 29706)
m.start()
t0 = time.monotonic(); c0 = cpu(m.proc.pid)
sw, auth, ready = swarm_until_ready(["--port", "29706", "--count", str(n), "--key-dir", os.path.join(HOME, ".cache/halite/swarm-keys"), "--distinct-keys", "1000"], root)
signin = (time.monotonic() - t0, cpu(m.proc.pid) - c0)
time.sleep(2)
walls, cpus = [], []
for _ in range(runs):
    c0 = cpu(m.proc.pid); t0 = time.monotonic()
    out = subprocess.run([os.path.join(bindir, "salt"), "-c", m.conf, "*", "test.ping", "--out", "json", "-t", "60"], capture_output=True, text=True).stdout
    walls.append(time.monotonic() - t0); cpus.append(cpu(m.proc.pid) - c0)
    if out.count("true") != n: print("warning: got", out.count("true"), file=sys.stderr)
rss = swarm.rollup(m.proc.pid, ("Rss",))[0] / 1024
stop(sw); m.stop()
print(json.dumps({"bin": bindir, "n": n, "signin_s": round(signin[0], 2), "signin_cpu_s": round(signin[1], 2), "ping_s": [round(x, 3) for x in walls], "ping_cpu_s": [round(x, 3) for x in cpus], "ping_median_s": round(statistics.median(walls), 3), "cpu_median_s": round(statistics.median(cpus), 3), "rss_mib": round(rss, 1)}))
