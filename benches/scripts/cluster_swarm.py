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
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import BIN, memory, stop, swarm_until_ready, tree  # noqa: E402

IPS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
LB = "127.0.0.10"


def cpu(pids):
    hz = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        for q in tree(p):
            try:
                f = open(f"/proc/{q}/stat").read().rsplit(")", 1)[1].split()
                total += int(f[11]) + int(f[12])
            except (OSError, IndexError):
                pass
    return total / hz


def run(n, keydir, base):
    root = tempfile.mkdtemp(prefix=f"cluster-swarm-{n}-")
    ret, pub, pool = base, base - 1, base - 2
    procs, confs = [], []
    for ip in IPS:
        d = os.path.join(root, ip)
        os.makedirs(os.path.join(d, "conf"))
        peers = "".join(f"  - {p}\n" for p in IPS if p != ip)
        with open(os.path.join(d, "conf", "master"), "w") as f:
            f.write(
                f"root_dir: {d}\nid: {ip}\ninterface: {ip}\nret_port: {ret}\npublish_port: {pub}\nauto_accept: True\n"
                f"log_level: warning\nhalite_data_dir: {d}/halite\npidfile: {d}/master.pid\ncluster_id: bench\n"
                f"cluster_secret: bench\ncluster_pool_port: {pool}\ncluster_isolated_filesystem: True\n"
                f"cluster_pki_dir: {d}/cpki\ncluster_peers:\n{peers}"
            )
        confs.append(os.path.join(d, "conf"))
    # Isolated filesystems: every founder's member key on every founder before the start
    # (docs/operations.md, "Member identity").
    ctl = os.path.join(BIN, "halite-ctl")
    pems = [subprocess.run([ctl, "-c", c, "member-key"], check=True, capture_output=True).stdout for c in confs]
    for c in confs:
        for ip, pem in zip(IPS, pems):
            subprocess.run([ctl, "-c", c, "peer-key", ip, "-"], input=pem, check=True, capture_output=True)
    for ip, c in zip(IPS, confs):
        log = open(os.path.join(root, ip, "master.log"), "w")
        procs.append(subprocess.Popen([os.path.join(BIN, "salt-master"), "-c", c, "-l", "warning"], stdout=log, stderr=log))
    for ip in IPS:
        t0 = time.monotonic()
        while not ping_answered_at(ip, ret):
            if time.monotonic() - t0 > 60:
                sys.exit(f"member {ip} not serving")
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
    a = ap.parse_args()
    rows = []
    base = 29600
    for n in [int(x) for x in a.sizes.split(",")]:
        base += 10
        row = run(n, a.keys, base)
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(a.out, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
