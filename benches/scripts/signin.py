#!/usr/bin/env python3
"""One 8,000-minion (or N) sign-in storm against one build: the swarm's `authenticated`
line (all signed in, seconds; the master's CPU-seconds in that window) and the
kernel's listen-queue overflows during the run. An A/B of two builds is two runs of
this script, alternated.

    signin.py N BINDIR [PORT] [PERF_OUT]

BINDIR holds `salt-master` and `halite-swarm` (a release build's `target/release`).
`EXTRA_CONF` (YAML lines) is appended to the master's config, e.g.
`EXTRA_CONF='zmq_backlog: 4096'`. With PERF_OUT, `perf record` samples the master
during the storm into that file. The master runs on a fresh state directory under
/tmp and is stopped by PID with the swarm.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
from swarm import HOME, swarm_until_ready, stop  # noqa: E402


def listen_overflows():
    lines = [l.split() for l in open("/proc/net/netstat") if l.startswith("TcpExt:")]
    return int(lines[1][lines[0].index("ListenOverflows")])


n = int(sys.argv[1]); swarm.BIN = sys.argv[2]
port = int(sys.argv[3]) if len(sys.argv) > 3 else 23706
perf_out = sys.argv[4] if len(sys.argv) > 4 else ""
root = tempfile.mkdtemp(prefix="signin-")
m = swarm.master_with_extra_conf(root, port)
m.start()
perf = None
if perf_out:
    perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "--call-graph", "dwarf,16384", "-p", str(m.proc.pid), "-o", perf_out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
o0 = listen_overflows()
try:
    sw, auth, ready = swarm_until_ready(["--port", str(port), "--count", str(n), "--key-dir", os.path.join(HOME, ".cache/halite/swarm-keys"), "--distinct-keys", "1000", "--master-pid", str(m.proc.pid)], root)
    if perf:
        perf.send_signal(signal.SIGINT); perf.wait()
    print(json.dumps({"bin": sys.argv[2], "n": n, "authenticated": auth, "listen_overflows": listen_overflows() - o0}))
    stop(sw)
finally:
    m.stop()
