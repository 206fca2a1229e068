#!/usr/bin/env python3
"""A lone master's cold start (process start to Salt's `ready` probe file) on a data dir
holding a history, against the same master on an empty data dir, alternated.

The history comes from `halite-bench restart --return-bytes 8192 --total 75000 --keep DIR`
(a node with a lone master's identity and the default limits; DIR/data is its data dir).

    benches/scripts/start_after_returns.py --bin BINDIR --history DIR [--runs 7]
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def config(root, data=None):
    """A master under `root`; its data dir is `data` when given (the master puts
    `root_dir` before every path, as Salt does: a link at `<root_dir>/data`)."""
    conf = os.path.join(root, "conf")
    os.makedirs(conf, exist_ok=True)
    os.makedirs(os.path.join(root, "m"), exist_ok=True)
    if data:
        os.symlink(data, os.path.join(root, "m/data"))
    with open(os.path.join(conf, "master"), "w") as f:
        f.write(f"root_dir: {root}/m\ninterface: 127.0.0.1\npublish_port: {free_port()}\nret_port: {free_port()}\n"
                "pidfile: /master.pid\nhalite_data_dir: /data\n")
    return conf


def start(binary, root, conf):
    """Seconds from the process start to its `ready` file; the master is stopped after."""
    ready = os.path.join(root, "m/var/cache/salt/master/health/ready")
    if os.path.exists(ready):
        os.remove(ready)
    t = time.monotonic()
    p = subprocess.Popen([os.path.join(binary, "salt-master"), "-c", conf, "-l", "warning"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(ready):
            if p.poll() is not None:
                raise SystemExit(f"salt-master exited with {p.returncode} (config in {conf})")
            if time.monotonic() - t > 120:
                raise SystemExit("no ready file after 120 s")
            time.sleep(0.001)
        return time.monotonic() - t
    finally:
        p.terminate()
        p.wait()


def spread(xs):
    xs = sorted(x * 1000 for x in xs)
    return f"{xs[0]:.0f} / {statistics.median(xs):.0f} / {xs[-1]:.0f}"


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--bin", required=True)
    a.add_argument("--history", required=True)
    a.add_argument("--runs", type=int, default=7)
    o = a.parse_args()
    tmp = tempfile.mkdtemp()
    try:
        empty_root, full_root = os.path.join(tmp, "empty"), os.path.join(tmp, "full")
        empty = config(empty_root)
        full = config(full_root, os.path.join(os.path.abspath(o.history), "data"))
        # Each master once before timing: the empty one founds its log, the other one
        # makes its views (keys, roots) from the history's state.
        start(o.bin, empty_root, empty)
        start(o.bin, full_root, full)
        e, f = [], []
        for _ in range(o.runs):
            e.append(start(o.bin, empty_root, empty))
            f.append(start(o.bin, full_root, full))
        print(f"| master start to ready ({o.runs} runs, alternated; ms min / median / max) | empty data dir | history |")
        print("|---|---|---|")
        print(f"| salt-master | {spread(e)} | {spread(f)} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
