#!/usr/bin/env python3
"""A three-member Halite cluster behind HAProxy under halite-swarm.

Three release `salt-master` processes on 127.0.0.1/.2/.3 form a cluster (isolated
filesystems, auto_accept), HAProxy (mode tcp, roundrobin) listens on 127.0.0.10 for both
ports, and N simulated minions sign in through it. Reported per N: time until all
signed in (first _auth sent to last accept reply), CPU of the three members during it,
`salt '*' test.ping` through the first member's CLI (median of 5: the job is committed
by the cluster, published by every member to the minions connected to it, and the
returns, committed through whichever member took them, are read on the first), and each
member's RSS.

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/cluster_swarm.py [--sizes 50,200,500]

With ``--direct P`` there is no balancer: P ``halite-swarm`` processes (each under the
per-process open-file limit: a minion holds two connections) take consecutive ranges of
ids and spread their minions over the three members (minion n on member n mod 3), as a
fleet configured with a list of masters would. That is how 24,000 minions fit on this
machine (HAProxy would hold four connections per minion in one process). The direct
mode also restarts the third member under that load (SIGTERM, start on the same state)
and times from its ``ret_port`` answering again to the first ``salt '*' test.ping``
that every minion answers:

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/cluster_swarm.py \
        --sizes 24000 --direct 3 --out docs/bench-data/cluster-swarm-24k.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import BIN, cpu, memory, ping_count, stop, swarm_until_ready, until_all_answer  # noqa: E402

IPS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
LB = "127.0.0.10"


def write_member_conf(root, ip, peers, ret, pub, pool, extra=""):
    """Member `ip`'s config directory under `root/ip` (its own state, isolated
    filesystem, auto_accept), knowing `peers`; `extra` is appended (YAML lines)."""
    d = os.path.join(root, ip)
    os.makedirs(os.path.join(d, "conf"))
    listed = "".join(f"  - {p}\n" for p in peers if p != ip)
    with open(os.path.join(d, "conf", "master"), "w") as f:
        f.write(
            f"root_dir: {d}\nid: {ip}\ninterface: {ip}\nret_port: {ret}\npublish_port: {pub}\nauto_accept: True\n"
            f"log_level: warning\nhalite_data_dir: {d}/halite\npidfile: {d}/master.pid\ncluster_id: bench\n"
            f"cluster_secret: bench\ncluster_pool_port: {pool}\ncluster_isolated_filesystem: True\n"
            f"cluster_pki_dir: {d}/cpki\ncluster_peers:\n{listed}" + extra
        )
    return os.path.join(d, "conf")


def start_members(root, ret, pub, pool, extra=""):
    """The three members' configs and processes (release builds, auto_accept); `extra`:
    YAML lines for every member, or a function of the member's ip giving them."""
    procs = []
    confs = [write_member_conf(root, ip, IPS, ret, pub, pool, extra(ip) if callable(extra) else extra) for ip in IPS]
    # Isolated filesystems: every founder's member key on every founder before the start
    # (docs/operations.md, "Member identity").
    ctl = os.path.join(BIN, "halite-ctl")
    pems = [subprocess.run([ctl, "-c", c, "member-key"], check=True, capture_output=True).stdout for c in confs]
    for c in confs:
        for ip, pem in zip(IPS, pems):
            subprocess.run([ctl, "-c", c, "peer-key", ip, "-"], input=pem, check=True, capture_output=True)
    for ip, c in zip(IPS, confs):
        procs.append(start_member(os.path.join(root, ip), c))
    for ip in IPS:
        wait_serving(ip, ret)
    return procs, confs


def start_member(d, conf):
    """A member's process, logging to `d`/master.log at `HALITE_BENCH_LOG_LEVEL`
    (default warning; `info` shows a roots sync's progress and the raft roles)."""
    log = open(os.path.join(d, "master.log"), "a")
    level = os.environ.get("HALITE_BENCH_LOG_LEVEL", "warning")
    return subprocess.Popen([os.path.join(BIN, "salt-master"), "-c", conf, "-l", level], stdout=log, stderr=log, stdin=subprocess.DEVNULL)


def wait_serving(ip, ret, limit=120):
    t0 = time.monotonic()
    while not ping_answered_at(ip, ret):
        if time.monotonic() - t0 > limit:
            sys.exit(f"member {ip} not serving")
    return time.monotonic() - t0


def answering(conf, timeout=60):
    return ping_count(os.path.join(BIN, "salt"), conf, timeout)


def run_direct(n, keydir, base, processes, distinct):
    """N minions over `processes` swarms connected straight to the members; then the
    third member restarted under that load."""
    root = tempfile.mkdtemp(prefix=f"cluster-direct-{n}-")
    ret, pub, pool = base, base - 1, base - 2
    procs, confs = start_members(root, ret, pub, pool)
    row = {"minions": n, "swarm_processes": processes, "distinct_keys": distinct}
    before = cpu([p.pid for p in procs])
    t0 = time.monotonic()
    swarms, auths = [], []
    per = -(-n // processes)
    try:
        # Started together (a fleet signing in at once); each waits for its own ready.
        started = []
        for i in range(processes):
            first, count = i * per, min(per, n - i * per)
            args = ["--master", ",".join(IPS), "--port", str(ret), "--count", str(count), "--first", str(first), "--key-dir", keydir]
            if distinct:
                args += ["--distinct-keys", str(distinct)]
            started.append(threading.Thread(target=lambda a=args, i=i: swarms.append((i,) + swarm_until_ready(a, os.path.join(root, f"swarm{i}")))))
            os.makedirs(os.path.join(root, f"swarm{i}"), exist_ok=True)
            started[-1].start()
        for t in started:
            t.join()
        row["all_ready_s"] = round(time.monotonic() - t0, 2)
        row["auth_s_per_process"] = [round(a["seconds"], 2) for _, _, a, _ in sorted(swarms, key=lambda s: s[0])]
        row["auth_failed"] = sum(sum(a["failed"].values()) for _, _, a, _ in swarms)
        row["ready"] = sum(r.get("count", 0) for _, _, _, r in swarms)
        row["members_cpu_s"] = round(cpu([p.pid for p in procs]) - before, 1)
        times, counts = [], []
        for _ in range(3):
            t1 = time.monotonic()
            counts.append(answering(confs[0]))
            times.append(time.monotonic() - t1)
        row["cli_ping_s"] = [round(t, 2) for t in times]
        row["cli_ping_answers"] = counts
        row["rss_mib"] = [round(memory(p.pid)[0] / 1024, 1) for p in procs]
        # The third member restarted under the load.
        stop(procs[2])
        procs[2] = start_member(os.path.join(root, IPS[2]), confs[2])
        row["restart_to_serving_s"] = round(wait_serving(IPS[2], ret), 2)
        # A run that misses a minion lasts its whole timeout: keep it short (twice the
        # slowest ping above, at least 3 s), so the figure's resolution is that timeout.
        limit = max(3, round(2 * max(times) + 1))
        row["restart_ping_timeout_s"] = limit
        row["restart_serving_to_all_answering_s"], runs, got = until_all_answer(lambda: answering(confs[0], limit), n)
        row["restart_ping_runs"] = runs
        row["restart_answering"] = got
        row["rss_mib_after_restart"] = [round(memory(p.pid)[0] / 1024, 1) for p in procs]
    finally:
        for _, sw, _, _ in swarms:
            stop(sw)
        for p in procs:
            stop(p)
    return row


def run(n, keydir, base):
    root = tempfile.mkdtemp(prefix=f"cluster-swarm-{n}-")
    ret, pub, pool = base, base - 1, base - 2
    procs, confs = start_members(root, ret, pub, pool)
    backend = lambda name, port: (
        f"frontend {name}\n  bind {LB}:{port}\n  default_backend {name}_m\nbackend {name}_m\n  balance roundrobin\n"
        + "".join(f"  server m{i} {ip}:{port} check inter 500ms\n" for i, ip in enumerate(IPS))
    )
    cfg = os.path.join(root, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write("global\n  maxconn 8192\ndefaults\n  mode tcp\n  timeout connect 1s\n  timeout client 1h\n  timeout server 1h\n" + backend("ret", ret) + backend("pub", pub))
    lb = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    row = {"minions": n}
    before = cpu([p.pid for p in procs])
    swarm, auth, _ = swarm_until_ready(["--master", LB, "--port", str(ret), "--count", str(n), "--key-dir", keydir], root)
    try:
        row["auth_s"] = auth["seconds"]
        row["auth_failed"] = sum(auth["failed"].values())
        row["members_cpu_s"] = cpu([p.pid for p in procs]) - before
        times = []
        for _ in range(5):
            t0 = time.monotonic()
            out = subprocess.run([os.path.join(BIN, "salt"), "-c", confs[0], "*", "test.ping", "--out", "json", "-t", "60"], capture_output=True, text=True).stdout
            times.append(time.monotonic() - t0)
            if out.count("true") != n:
                print(f"  warning: {out.count('true')}/{n} returns", file=sys.stderr)
        row["cli_ping_s"] = statistics.median(times)
        row["rss_mib"] = [round(memory(p.pid)[0] / 1024, 1) for p in procs]
    finally:
        stop(swarm)
        stop(lb)
        for p in procs:
            stop(p)
    return row


def ping_answered_at(ip, port):
    import socket
    import zmq
    import msgpack

    try:
        socket.create_connection((ip, port), timeout=0.05).close()
    except OSError:
        time.sleep(0.01)
        return False
    s = zmq.Context.instance().socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://{ip}:{port}")
    try:
        s.send(msgpack.packb({"enc": "clear", "load": {"cmd": "ping"}, "version": 3}))
        return s.poll(5000) != 0
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="50,200,500")
    ap.add_argument("--keys", default=os.path.join(os.path.expanduser("~"), ".cache/halite/swarm-keys"))
    ap.add_argument("--out", default="docs/bench-data/cluster-swarm.json")
    ap.add_argument("--direct", type=int, default=0, help="no balancer: this many swarm processes spread over the members")
    ap.add_argument("--distinct-keys", type=int, default=1000, help="key pairs the swarm uses (0: one per minion)")
    a = ap.parse_args()
    rows = []
    base = 29600
    for n in [int(x) for x in a.sizes.split(",")]:
        base += 10
        row = run_direct(n, a.keys, base, a.direct, a.distinct_keys) if a.direct else run(n, a.keys, base)
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(a.out, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
