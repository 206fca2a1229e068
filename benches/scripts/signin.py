#!/usr/bin/env python3
"""One 8,000-minion (or N) sign-in storm against one build: the swarm's `authenticated`
line (all signed in, seconds; the master's CPU-seconds in that window), the
kernel's listen-queue overflows during the run, and the floor: the RSA signatures the
master made and the CPU-seconds its threads spent in them
(`halite_rsa_private_cpu_seconds_total{op="sign"}`, read from its health endpoint on
PORT + 3 before the storm and once every minion is ready), with `floor_ratio`, the
master's CPU over them. An A/B of two builds is two runs of this script, alternated.

    signin.py N BINDIR [PORT] [PERF_OUT]

BINDIR holds `salt-master` and `halite-swarm` (a release build's `target/release`).
`EXTRA_CONF` (YAML lines) is appended to the master's config, e.g.
`EXTRA_CONF='zmq_backlog: 4096'`. With PERF_OUT, `perf record` samples the master
during the storm (until the swarm reports every minion signed in) into that file
(`signin_profile.py` splits it into the parts of a sign-in). The master runs on a fresh
state directory under `$TMPDIR` (/tmp by default) and is stopped by PID with the swarm.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
from swarm import HOME, swarm_until_ready, stop  # noqa: E402


def rsa_sign(health):
    """(signatures, CPU-seconds in them) from the master's metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{health}/metrics", timeout=30).read().decode()
    got = {}
    for line in text.splitlines():
        for name in ("halite_rsa_private_operations_total", "halite_rsa_private_cpu_seconds_total"):
            if line.startswith(name + '{op="sign"}'):
                got[name] = float(line.rsplit(" ", 1)[1])
    return got.get("halite_rsa_private_operations_total", 0.0), got.get("halite_rsa_private_cpu_seconds_total", 0.0)


def listen_overflows():
    lines = [l.split() for l in open("/proc/net/netstat") if l.startswith("TcpExt:")]
    return int(lines[1][lines[0].index("ListenOverflows")])


n = int(sys.argv[1]); swarm.BIN = sys.argv[2]
port = int(sys.argv[3]) if len(sys.argv) > 3 else 23706
perf_out = sys.argv[4] if len(sys.argv) > 4 else ""
root = tempfile.mkdtemp(prefix="signin-")
m = swarm.master_with_extra_conf(root, port)
health = port + 3
with open(os.path.join(m.conf, "master"), "a") as f:
    f.write(f"halite_health_port: {health}\n")
m.start()
s0 = rsa_sign(health)
perf = None
if perf_out:
    perf = subprocess.Popen(["perf", "record", "-F", "999", "-g", "--call-graph", "dwarf,16384", "-p", str(m.proc.pid), "-o", perf_out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
o0 = listen_overflows()
try:
    def authenticated(ev):
        # The sampling covers the sign-in storm only, not the subscriptions after it.
        if perf and ev["event"] == "authenticated":
            perf.send_signal(signal.SIGINT); perf.wait()

    sw, auth, ready = swarm_until_ready(["--port", str(port), "--count", str(n), "--key-dir", os.path.join(HOME, ".cache/halite/swarm-keys"), "--distinct-keys", "1000", "--master-pid", str(m.proc.pid)], root, authenticated)
    s1 = rsa_sign(health)
    signs, sign_cpu = s1[0] - s0[0], round(s1[1] - s0[1], 3)
    master_cpu = auth.get("master_cpu_seconds")
    ratio = round(master_cpu / sign_cpu, 3) if master_cpu and sign_cpu else None
    print(json.dumps({"bin": sys.argv[2], "n": n, "authenticated": auth, "listen_overflows": listen_overflows() - o0, "rsa_signs": signs, "rsa_sign_cpu_s": sign_cpu, "floor_ratio": ratio}))
    stop(sw)
finally:
    m.stop()
