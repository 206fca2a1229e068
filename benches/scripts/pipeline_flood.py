#!/usr/bin/env python3
"""A master's RSS while clients pipeline requests on the request port and never read
the replies.

Starts a master (fresh state directory, `auto_accept: True`) and opens K DEALER
connections to its request port with a receive high-water mark of 1 and a 4 KiB
`SO_RCVBUF`, so that they take almost nothing off the wire. Each round, every
connection sends up to 20,000 clear `ping`s (without blocking: a connection whose own
send queue is full moves on); after half a second the master's RSS is printed beside
this script's own. A master that queues every reply for such a client grows by about
what the clients send; one that bounds a connection's queued replies stays flat.

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/pipeline_flood.py \
        [--bin DIR] [--connections 8] [--rounds 40] [--port 24606]

Release binaries in $CARGO_TARGET_DIR/release (or `--bin`). The master is stopped by
PID at the end.
"""

import argparse
import os
import sys
import tempfile
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
from swarm import Master  # noqa: E402


def rss_mib(pid="self"):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=swarm.BIN)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--port", type=int, default=24606)
    args = ap.parse_args()
    swarm.BIN = args.bin
    m = Master("halite", tempfile.mkdtemp(prefix="pipeline-flood-"), args.port)
    m.start()
    ctx = zmq.Context()
    socks = []
    try:
        print(f"start: master {rss_mib(m.proc.pid)} MiB", flush=True)
        for _ in range(args.connections):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.RCVHWM, 1)
            s.setsockopt(zmq.RCVBUF, 4096)
            s.setsockopt(zmq.SNDHWM, 200000)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(f"tcp://127.0.0.1:{args.port}")
            socks.append(s)
        body = msgpack.packb({"enc": "clear", "load": {"cmd": "ping"}, "version": 3})
        for r in range(args.rounds):
            for s in socks:
                for _ in range(20000):
                    try:
                        s.send_multipart([b"", body], flags=zmq.NOBLOCK)
                    except zmq.Again:
                        break
            time.sleep(0.5)
            print(f"round {r}: master {rss_mib(m.proc.pid)} MiB, this client {rss_mib()} MiB", flush=True)
    finally:
        for s in socks:
            s.close()
        m.stop()


if __name__ == "__main__":
    main()
