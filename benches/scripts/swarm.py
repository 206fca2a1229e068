#!/usr/bin/env python3
"""Halite and the reference salt-master 3008.5 side by side under a minion swarm.

For each master and each swarm size (default 50, 200, 500) this script:

1. starts the master on a fresh state directory with ``auto_accept: True``;
2. runs ``halite-swarm --count N --master-pid PID``: every minion signs in at once
   (wall time until the last accept reply, CPU time of the master's process tree),
   subscribes, and answers ``test.ping``;
3. runs ``salt '*' test.ping`` through each master's own CLI (5 runs, median), and for
   the reference also through its in-process ``LocalClient`` (5 runs, median);
4. reads the master tree's RSS and PSS with all minions connected;
5. stops the master and measures a cold start with the N accepted keys: process start
   to the first answered clear ``ping`` on the request port.

Run it with the reference venv's Python (it needs pyzmq, and salt for LocalClient):

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/swarm.py \
        [--sizes 50,200,500] [--out docs/bench-data/swarm.json]

Release binaries are expected in $CARGO_TARGET_DIR/release (default
~/.cache/halite/target/release): ``cargo build --release -p halite-master -p halite-tools``.
Every process started here is stopped by PID, children included.
"""

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import shlex
import threading
import time

import zmq
import msgpack

HOME = os.path.expanduser("~")
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(HOME, ".cache/halite/target")), "release")
VENV = os.environ.get("HALITE_SALT_VENV", os.path.join(HOME, ".cache/halite/venv-salt-3008.5"))


# What `perf stat` counts for the scripts' ``HALITE_PERF_STAT_OUT``: a thread's CPU,
# its context switches and migrations, and the syscalls of the request path. Counts,
# not samples: they have no skew, and a VM without hardware counters has them.
PERF_STAT_EVENTS = ",".join(["task-clock", "context-switches", "cpu-migrations", "syscalls:sys_enter_futex",
                             "syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_sendto",
                             "syscalls:sys_enter_recvfrom", "syscalls:sys_enter_write"])


def perf_start(pid, freq=999, stack_bytes=32768):
    """What the environment asks for, attached to PID until `perf_stop`:
    ``HALITE_PERF_OUT=FILE``, `perf record` (FREQ samples a second, DWARF call graphs of
    STACK_BYTES); ``HALITE_PERF_STAT_OUT=FILE``, `perf stat` of PID's threads, one line a
    thread and event (PERF_STAT_EVENTS, or the comma-separated events of
    ``HALITE_PERF_STAT_EVENTS``: uprobes on mimalloc's entry points count the master's
    allocations, docs/benchmarks.md "Returns"); ``HALITE_HEAPTRACK_OUT=FILE``, `heaptrack`
    attached to PID (a master built with the system allocator: heaptrack sees `malloc`,
    not mimalloc), so the sign-ins before the window are not counted. None if none is
    set."""
    if os.environ.get("HALITE_HEAPTRACK_OUT"):
        proc = subprocess.Popen(["heaptrack", "-o", os.environ["HALITE_HEAPTRACK_OUT"], "-p", str(pid)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Attaching injects through gdb: wait until heaptrack says it is in.
        for line in proc.stdout:
            if "injection finished" in line:
                break
        return proc
    if os.environ.get("HALITE_PERF_OUT"):
        cmd = ["perf", "record", "-F", str(freq), "-g", "--call-graph", f"dwarf,{stack_bytes}", "-p", str(pid), "-o", os.environ["HALITE_PERF_OUT"]]
    elif os.environ.get("HALITE_PERF_STAT_OUT"):
        events = os.environ.get("HALITE_PERF_STAT_EVENTS") or PERF_STAT_EVENTS
        cmd = ["perf", "stat", "-e", events, "--per-thread", "-p", str(pid), "-o", os.environ["HALITE_PERF_STAT_OUT"]]
    else:
        return None
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # perf attaches to every thread before the measured window opens
    return proc


def perf_stop(proc):
    """Ends what `perf_start` began (it writes its file on SIGINT)."""
    if proc:
        proc.send_signal(signal.SIGINT)
        proc.wait()


def tree(pid):
    """pid and its live descendants."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(rest[1]), []).append(int(d))
        except (OSError, IndexError):
            pass
    out, i = [pid], 0
    while i < len(out):
        out.extend(children.get(out[i], []))
        i += 1
    return out


def cpu(pids):
    """CPU-seconds (user + system) spent so far by the processes `pids` and their children."""
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


def rollup(pid, fields):
    """The `smaps_rollup` fields named (KiB each, e.g. "Rss", "Pss", "Anonymous"),
    summed over the process tree, in the order named."""
    total = dict.fromkeys(fields, 0)
    for p in tree(pid):
        try:
            for line in open(f"/proc/{p}/smaps_rollup"):
                name = line.split(":", 1)[0]
                if name in total:
                    total[name] += int(line.split()[1])
        except OSError:
            pass
    return tuple(total[f] for f in fields)


def memory(pid):
    return rollup(pid, ("Rss", "Pss"))


def stop(proc):
    """SIGTERM the process tree, SIGKILL what is left after 10 s."""
    pids = tree(proc.pid)
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def ping_answered(port, timeout_ms=200):
    """A clear `ping` on the request port is answered. A plain TCP connect is tried
    first (every millisecond), so ZeroMQ's reconnect interval does not blur the time."""
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
    except OSError:
        time.sleep(0.001)
        return False
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://127.0.0.1:{port}")
    try:
        s.send(msgpack.packb({"enc": "clear", "load": {"cmd": "ping"}, "version": 3}))
        return s.poll(timeout_ms * 25) != 0
    finally:
        s.close()


def ping_count(salt, conf, timeout):
    """Minions that answered one `salt '*' test.ping -t TIMEOUT` run (`salt`: the CLI)."""
    out = subprocess.run([salt, "-c", conf, "*", "test.ping", "--out", "json", "-t", str(timeout)], capture_output=True, text=True).stdout
    return out.count("true")


def until_all_answer(ask, n, give_up=600, trace=None):
    """Calls `ask()` (one ping run: how many answered) back to back until it returns `n`
    or `give_up` seconds have passed. Returns (seconds, runs, the last count); each run's
    start, length and count are appended to `trace` when one is given."""
    t0, runs, got = time.monotonic(), 0, 0
    while time.monotonic() - t0 < give_up:
        runs += 1
        started = time.monotonic()
        got = ask()
        if trace is not None:
            trace.append({"start_s": round(started - t0, 2), "seconds": round(time.monotonic() - started, 2), "answered": got})
        if got == n:
            break
    return round(time.monotonic() - t0, 2), runs, got


class Master:
    def __init__(self, kind, root, port):
        self.kind, self.root, self.ret, self.pub = kind, root, port, port - 1
        self.conf = os.path.join(root, "conf")
        os.makedirs(self.conf, exist_ok=True)
        state = os.path.join(root, "state")
        with open(os.path.join(self.conf, "master"), "w") as f:
            f.write(
                f"root_dir: {state}\ninterface: 127.0.0.1\npublish_port: {self.pub}\nret_port: {self.ret}\n"
                f"auto_accept: True\nuser: root\nlog_level: warning\nhalite_data_dir: {state}/halite\n"
                f"pidfile: {state}/master.pid\n"
            )
        self.proc = None

    def start(self):
        exe = os.path.join(BIN, "salt-master") if self.kind == "halite" else os.path.join(VENV, "bin/salt-master")
        log = open(os.path.join(self.root, "master.log"), "a")
        t0 = time.monotonic()
        # HALITE_MASTER_WRAPPER runs the master under a tool, e.g. "heaptrack --record-only -o FILE"
        # (the memory read is then the whole process tree's, the tool's included).
        wrap = shlex.split(os.environ.get("HALITE_MASTER_WRAPPER", "")) if self.kind == "halite" else []
        self.proc = subprocess.Popen(wrap + [exe, "-c", self.conf, "-l", "warning"], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        while not ping_answered(self.ret):
            if self.proc.poll() is not None:
                sys.exit(f"{self.kind} master exited; see {self.root}/master.log")
            if time.monotonic() - t0 > 120:
                sys.exit(f"{self.kind} master not serving after 120 s")
        return time.monotonic() - t0

    def stop(self):
        if self.proc:
            stop(self.proc)
            self.proc = None

    def cli_ping(self, n):
        return statistics.median(wall for wall, _ in self.cli_ping_runs(n))

    def cli_ping_runs(self, n, runs=5, others=()):
        """`runs` CLI `test.ping`s: each one's wall time and the master's CPU-seconds
        (with `others`, a list of PIDs such as the swarm's, two more: their
        CPU-seconds in the same run, and the `salt` CLI's own)."""
        exe = os.path.join(BIN, "salt") if self.kind == "halite" else os.path.join(VENV, "bin/salt")
        out_runs = []
        for _ in range(runs):
            c0, o0, t0 = cpu([self.proc.pid]), cpu(list(others)), time.monotonic()
            k0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run([exe, "-c", self.conf, "*", "test.ping", "--out", "json", "-t", "60"], capture_output=True, text=True).stdout
            k1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            self.last_cli_cpu = (k1.ru_utime + k1.ru_stime) - (k0.ru_utime + k0.ru_stime)
            run = (time.monotonic() - t0, cpu([self.proc.pid]) - c0)
            out_runs.append(run + (cpu(list(others)) - o0, self.last_cli_cpu) if others else run)
            got = out.count("true")
            if got != n:
                print(f"  warning: {self.kind} CLI saw {got}/{n} returns", file=sys.stderr)
        return out_runs

    def local_client_ping(self, n):
        import salt.client

        client = salt.client.LocalClient(c_path=os.path.join(self.conf, "master"))
        times = []
        for _ in range(5):
            t0 = time.monotonic()
            ret = client.cmd("*", "test.ping", timeout=60)
            times.append(time.monotonic() - t0)
            if len(ret) != n:
                print(f"  warning: LocalClient saw {len(ret)}/{n} returns", file=sys.stderr)
        return statistics.median(times)


def swarm_until_ready(args, root, on_event=None):
    """Starts halite-swarm with `args`; returns the process (still running, answering
    jobs) and its `authenticated` and `ready` events. `on_event` is called with each
    event as it comes."""
    proc = subprocess.Popen(
        [os.path.join(BIN, "halite-swarm"), "--auth-timeout", "60"] + args,
        stdout=subprocess.PIPE, stderr=open(os.path.join(root, "swarm.log"), "w"), text=True,
    )
    events = {}
    for line in proc.stdout:
        ev = json.loads(line)
        events[ev["event"]] = ev
        if on_event:
            on_event(ev)
        if ev["event"] == "ready":
            break
    # The swarm prints one line per job from now on. Keep reading them: a pipe nobody
    # reads fills after about 600 lines (64 KiB) and the swarm's next print blocks, which
    # stalls every simulated minion (the "swarm stops after ~594 jobs" of the first soaks).
    proc.later = []
    threading.Thread(target=lambda: proc.later.extend(json.loads(l) for l in proc.stdout), daemon=True).start()
    return proc, events.get("authenticated", {}), events.get("ready", {})


def returns_per_second(swarm, since):
    """Median over the jobs the swarm finished after its `since`-th line: returns
    acknowledged by the master per second, from the first minion receiving the publish
    to the last return's reply (the swarm's `job` lines)."""
    time.sleep(0.5)
    rates = [j["returned"] / j["seconds"] for j in swarm.later[since:] if j.get("event") == "job" and j["seconds"] > 0]
    return round(statistics.median(rates)) if rates else None


def run_one(kind, n, port, keydir, distinct):
    root = tempfile.mkdtemp(prefix=f"swarm-{kind}-{n}-")
    m = Master(kind, root, port)
    row = {"master": kind, "minions": n}
    row["cold_start_empty_s"] = m.start()
    args = ["--port", str(port), "--count", str(n), "--key-dir", keydir, "--master-pid", str(m.proc.pid)]
    if distinct:
        args += ["--distinct-keys", str(distinct)]
    swarm, auth, ready = swarm_until_ready(args, root)
    try:
        row["auth_s"] = auth["seconds"]
        row["auth_master_cpu_s"] = auth["master_cpu_seconds"]
        row["auth_failed"] = sum(auth["failed"].values())
        row["processes"] = auth["master_processes"]
        row["ready"] = ready["count"]
        since = len(swarm.later)
        row["cli_ping_s"] = m.cli_ping(n)
        row["returns_per_s"] = returns_per_second(swarm, since)
        if kind == "reference":
            row["local_client_ping_s"] = m.local_client_ping(n)
        rss, pss = memory(m.proc.pid)
        row["rss_mib"], row["pss_mib"] = rss / 1024, pss / 1024
    finally:
        stop(swarm)
        m.stop()
    row["cold_start_with_keys_s"] = m.start()
    m.stop()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="50,200,500")
    ap.add_argument("--masters", default="halite,reference")
    ap.add_argument("--keys", default=os.path.join(HOME, ".cache/halite/swarm-keys"))
    ap.add_argument("--out", default="docs/bench-data/swarm.json")
    ap.add_argument("--distinct-keys", type=int, default=1000,
                    help="key pairs the swarm uses (minion n takes key n mod K; 0: one each); the master's work is the same")
    a = ap.parse_args()
    sweep(a.sizes, a.masters, 28506, lambda n, kind, port: run_one(kind, n, port, a.keys, a.distinct_keys), a.out)


def sweep(sizes, variants, first_port, run, out):
    """Runs `run(n, variant, port)` for every size in `sizes` and every variant in
    `variants` (both comma-separated), each on ports of its own; prints each row as a
    JSON line and writes them all to `out`."""
    rows = []
    port = first_port
    for n in [int(x) for x in sizes.split(",")]:
        for v in variants.split(","):
            port += 10
            row = run(n, v, port)
            print(json.dumps(row), flush=True)
            rows.append(row)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "rows": rows}, f, indent=1)


def master_with_extra_conf(root, port):
    """A Halite `Master` under `root` whose config has the `EXTRA_CONF` environment
    variable's YAML lines appended (the single-build scripts' knob), not started."""
    m = Master("halite", root, port)
    if os.environ.get("EXTRA_CONF"):
        with open(os.path.join(m.conf, "master"), "a") as f:
            f.write(os.environ["EXTRA_CONF"] + "\n")
    return m


if __name__ == "__main__":
    main()
