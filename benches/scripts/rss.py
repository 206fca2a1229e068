#!/usr/bin/env python3
"""The master's resident memory at N simulated minions, for one build: after start,
after every minion signed in, after one `salt '*' test.ping` and after PINGS more,
each with its largest mappings (the binary, the libraries, the heaps), the master CPU
and wall time of the pings, and the largest mappings at the end. An A/B of two builds
is two runs of this script, alternated.

    rss.py N BINDIR [PINGS]

BINDIR holds `salt-master`, `salt` and `halite-swarm` (a release build's
`target/release`). `EXTRA_CONF` (YAML lines) is appended to the master's config. The
master runs on a fresh state directory under /tmp and is stopped by PID with the swarm.
"""
import collections
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
from swarm import HOME, swarm_until_ready, stop  # noqa: E402


def mappings(pid):
    """(name, size KiB, RSS KiB) of every mapping of the process."""
    out, cur = [], None
    for line in open(f"/proc/{pid}/smaps"):
        p = line.split()
        if "-" in p[0] and not p[0].endswith(":"):
            a, b = (int(x, 16) for x in p[0].split("-"))
            cur = [p[5] if len(p) > 5 else "[anon]", (b - a) // 1024, 0]
            out.append(cur)
        elif p[0] == "Rss:" and cur is not None:
            cur[2] = int(p[1])
    return out


def snapshot(label, pid):
    by_name = collections.Counter()
    for name, _, rss in mappings(pid):
        by_name[name] += rss
    return {"at": label, "rss_mib": round(sum(by_name.values()) / 1024, 1), "largest_mib": {k: round(v / 1024, 1) for k, v in by_name.most_common(6)}}


n = int(sys.argv[1]); swarm.BIN = sys.argv[2]; pings = int(sys.argv[3]) if len(sys.argv) > 3 else 30
port = int(os.environ.get("HALITE_BENCH_PORT", "23706"))
root = tempfile.mkdtemp(prefix="rss-")
m = swarm.master_with_extra_conf(root, port)
m.start()
try:
    report = {"bin": sys.argv[2], "n": n, "snapshots": [snapshot("start", m.proc.pid)]}
    sw, auth, ready = swarm_until_ready(["--port", str(port), "--count", str(n), "--key-dir", os.path.join(HOME, ".cache/halite/swarm-keys"), "--distinct-keys", "1000"], root)
    report["snapshots"].append(snapshot("signed in", m.proc.pid))
    time.sleep(2)
    for k in (1, pings):
        runs = m.cli_ping_runs(n, k, others=[sw.pid])
        s = snapshot(f"after {k} more pings", m.proc.pid)
        s["ping_median_s"] = round(statistics.median(r[0] for r in runs), 3)
        s["master_cpu_median_s"] = round(statistics.median(r[1] for r in runs), 3)
        report["snapshots"].append(s)
    report["largest_mappings_at_end"] = [{"name": name, "size_mib": round(size / 1024, 1), "rss_mib": round(rss / 1024, 1)} for name, size, rss in sorted(mappings(m.proc.pid), key=lambda x: -x[2])[:10]]
    stop(sw)
    print(json.dumps(report))
finally:
    m.stop()
