#!/usr/bin/env python3
"""The cluster measured as it is deployed: three release `salt-master` processes on
127.0.0.1/.2/.3 (cluster_swarm.py's members: isolated filesystems, auto_accept),
simulated minions (`halite-swarm`) spread over them, minion n on member n mod 3.

1. **returns**: a blast of held returns (`halite-swarm --blast K`, as returns.py) spread
   over the three members, against the same blast on one master process; returns
   acknowledged per second (an acknowledged return is committed: fsynced by a majority
   and applied), each member's CPU per return, and each thread's CPU from
   /proc/PID/task/*/stat sampled during the blast.
2. **kill -9 of the leader**, R rounds: the leader is found with `salt-run
   cluster.members`, killed with SIGKILL; a probe sends `salt -L <minions> test.ping`
   jobs back to back through a surviving member to probe minions connected to the two
   survivors (the job and its returns are committed by the cluster); the figure is the
   kill to the end of the first probe, started after the kill, that every probe minion
   answered. The killed member is started again and waited for until ready.
3. **restart after a history**: the third member stopped (SIGTERM) and started again,
   start to ready (the `health/ready` probe file) and start to `ret_port` answering, on
   the fresh cluster and again after H returns were committed (the log compacts itself
   past `cluster_max_log_size`); each blast of that history is recorded with every
   member's CPU a return, by thread, so what grows with the history is read apart from
   the machine's changing speed.
4. **join**: a fourth process (127.0.0.4) joins the cluster holding N accepted keys
   (signed in by the swarm, as minions do) and M MiB of roots (`file_roots`, made equal
   on every member with `salt-run cluster.sync_roots`); its start to ready.

Beside them, the machine's floors: `fsync` per second and sequential write with fsync
on the same disk, and `halite-bench floor` (a process that only frames the blast's
bytes for the same connections).

    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/cluster_deployed.py --quick
    ~/.cache/halite/venv-salt-3008.5/bin/python benches/scripts/cluster_deployed.py \\
        --out docs/bench-data/cluster-deployed.json

``HALITE_BENCH_LOG_LEVEL=info`` makes the members log at info (a roots sync's progress,
raft roles) in ``<root>/<ip>/master.log``; ``--keep`` keeps them.
``--parts returns,kill9,restart,join`` picks parts; ``--pairs P`` runs the returns part P
times, one process and the cluster alternated (docs/benchmarks.md, "Cluster as
deployed").

Release binaries in $CARGO_TARGET_DIR/release. Every process started here is stopped by
PID, children included.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm  # noqa: E402
from swarm import HOME, Master, stop, swarm_until_ready  # noqa: E402
from cluster_swarm import IPS, ping_answered_at, start_member, start_members, write_member_conf  # noqa: E402
from returns import publish, stored  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
JOINER = "127.0.0.4"


def binary(name):
    return os.path.join(swarm.BIN, name)


class ThreadSampler:
    """Per-thread CPU ticks of some processes, read from /proc every `every` seconds
    in a thread of its own, so a window's CPU can be cut out afterwards."""

    def __init__(self, pids, every=0.05):
        self.pids, self.every, self.samples, self.on = list(pids), every, [], True
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def read(self):
        out = {}
        for pid in self.pids:
            threads = {}
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    try:
                        raw = open(f"/proc/{pid}/task/{tid}/stat").read()
                    except OSError:
                        continue
                    comm = raw[raw.index("(") + 1:raw.rindex(")")]
                    f = raw.rsplit(")", 1)[1].split()
                    threads[tid] = (comm, int(f[11]) + int(f[12]))
            except OSError:
                pass
            out[pid] = threads
        return out

    def loop(self):
        while self.on:
            self.samples.append((time.monotonic(), self.read()))
            time.sleep(self.every)

    def stop(self):
        self.on = False
        self.t.join()

    def window(self, t0, t1):
        """{pid: {thread name: CPU-seconds}} between the last sample at or before t0
        and the first at or after t1."""
        a = max((s for s in self.samples if s[0] <= t0), key=lambda s: s[0], default=self.samples[0])
        b = min((s for s in self.samples if s[0] >= t1), key=lambda s: s[0], default=self.samples[-1])
        out = {}
        for pid in self.pids:
            names = {}
            for tid, (comm, ticks) in b[1].get(pid, {}).items():
                before = a[1].get(pid, {}).get(tid, (comm, 0))[1]
                names[comm] = names.get(comm, 0) + (ticks - before) / HZ
            out[pid] = {k: round(v, 2) for k, v in sorted(names.items(), key=lambda kv: -kv[1]) if v > 0}
        return out


def blast(masters, port, pids, n, per, keydir, root, publish_conf, first=0, prefix="swarm-"):
    """A `--blast per` of n minions spread over `masters`, the jobs published through
    `publish_conf`; the blast line, each process's CPU by thread in its window, and the
    last job's returns as the job cache of `publish_conf` holds them."""
    args = ["--master", ",".join(masters), "--port", str(port), "--count", str(n), "--first", str(first),
            "--prefix", prefix, "--key-dir", keydir, "--distinct-keys", "1000", "--blast", str(per)]
    if len(pids) == 1:
        args += ["--master-pid", str(pids[0])]
    os.makedirs(root, exist_ok=True)
    sw = subprocess.Popen([binary("halite-swarm"), "--auth-timeout", "60"] + args, stdout=subprocess.PIPE,
                          stderr=open(os.path.join(root, "swarm.log"), "w"), text=True)
    sampler = ThreadSampler(pids)
    try:
        for line in sw.stdout:
            if json.loads(line)["event"] == "ready":
                break
        time.sleep(0.5)
        jids = publish(type("M", (), {"kind": "halite", "conf": publish_conf}), per)
        ev = None
        for line in sw.stdout:
            ev = json.loads(line)
            if ev["event"] == "blast":
                break
        t1 = time.monotonic()
        if not ev or ev.get("event") != "blast":
            sys.exit(f"no blast line; see {root}/swarm.log")
        time.sleep(2 * sampler.every)
        threads = sampler.window(t1 - ev["seconds"], t1)
    finally:
        sampler.stop()
        stop(sw)
    return ev, threads, stored(type("M", (), {"kind": "halite", "conf": publish_conf}), jids[-1])


def returns_row(ev, threads):
    row = {k: ev[k] for k in ("acknowledged", "failed", "seconds", "returns_per_s")}
    per = [round(1e6 * sum(t.values()) / max(1, ev["acknowledged"]), 1) for t in threads.values()]
    row["master_cpu_us_per_return"] = per
    row["master_cpu_us_per_return_total"] = round(sum(per), 1)
    row["swarm_cpu_us_per_return"] = round(1e6 * ev["swarm_cpu_seconds"] / max(1, ev["acknowledged"]), 1)
    row["threads_cpu_s"] = list(threads.values())
    return row


def runner(conf, *args, timeout=60):
    done = subprocess.run([binary("salt-run"), "-c", conf, *args, "--out", "json", "-t", str(timeout)],
                          capture_output=True, text=True, timeout=timeout + 30)
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return {"error": (done.stdout + done.stderr).strip()[-2000:]}
    return data.get("data", data) if isinstance(data, dict) and "outputter" in data else data


def leader_of(confs, limit=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        for c in confs:
            m = runner(c, "cluster.members", timeout=5)
            if isinstance(m, dict) and m.get("leader_id") in IPS:
                return IPS.index(m["leader_id"])
        time.sleep(0.1)
    sys.exit("no leader")


def ready_file(root, ip):
    return os.path.join(root, ip, "var/cache/salt/master/health/ready")


def restart_timed(root, ip, conf, ret, proc=None):
    """Stops `proc` (SIGTERM) if given, starts the member again: seconds from its start
    to `ret_port` answering and to its ready file; the new process."""
    if proc:
        stop(proc)
    ready = ready_file(root, ip)
    if os.path.exists(ready):
        os.remove(ready)
    t0 = time.monotonic()
    p = start_member(os.path.join(root, ip), conf)
    serving = None
    while True:
        if serving is None and ping_answered_at(ip, ret):
            serving = time.monotonic() - t0
        if os.path.exists(ready):
            if serving is None:
                continue
            return round(serving, 3), round(time.monotonic() - t0, 3), p
        if p.poll() is not None:
            sys.exit(f"member {ip} exited; see {root}/{ip}/master.log")
        if time.monotonic() - t0 > 600:
            sys.exit(f"member {ip} not ready after 600 s")
        time.sleep(0.002)


def probe_once(conf, ids, timeout):
    """One `salt -L ids test.ping` through `conf`'s member: did every id answer?"""
    try:
        out = subprocess.run([binary("salt"), "-c", conf, "-L", ",".join(ids), "test.ping", "--out", "json", "-t", str(timeout)],
                             capture_output=True, text=True, timeout=timeout + 20).stdout
    except subprocess.TimeoutExpired:
        return False
    return out.count("true") == len(ids)


def failover_rounds(root, procs, confs, ret, rounds, probe_timeout):
    """kill -9 of the leader, `rounds` times, with a job probe through a survivor."""
    probe_dir = os.path.join(root, "probe")
    os.makedirs(probe_dir, exist_ok=True)
    keydir = os.path.join(HOME, ".cache/halite/swarm-keys")
    psw, _, ready = swarm_until_ready(["--master", ",".join(IPS), "--port", str(ret), "--count", "9", "--prefix", "probe-",
                                       "--key-dir", keydir, "--distinct-keys", "9"], probe_dir)
    out = []
    try:
        for r in range(rounds):
            lead = leader_of(confs)
            via = (lead + 1) % 3
            ids = [f"probe-{n}" for n in range(9) if n % 3 != lead]
            # Every probe minion answers (those of a member restarted in the round before
            # have signed in again) three times in a row before the kill.
            base, t_wait = [], time.monotonic()
            while len(base) < 3 and time.monotonic() - t_wait < 120:
                t = time.monotonic()
                base = base + [time.monotonic() - t] if probe_once(confs[via], ids, probe_timeout) else []
            t_kill = time.monotonic()
            os.kill(procs[lead].pid, signal.SIGKILL)
            procs[lead].wait()
            tries = 0
            while True:
                tries += 1
                ok = probe_once(confs[via], ids, probe_timeout)
                if ok:
                    took = time.monotonic() - t_kill
                    break
                if time.monotonic() - t_kill > 120:
                    took = None
                    break
            new_lead = leader_of([confs[via]])
            serving, ready, procs[lead] = restart_timed(root, IPS[lead], confs[lead], ret)
            row = {"round": r, "killed": IPS[lead], "via": IPS[via], "new_leader": IPS[new_lead],
                   "kill_to_answered_s": round(took, 3) if took else None, "probes": tries,
                   "probe_before_kill_s": [round(b, 3) for b in base],
                   "restart_to_serving_s": serving, "restart_to_ready_s": ready}
            print(json.dumps(row), flush=True)
            out.append(row)
    finally:
        stop(psw)
    return out


def load_keys(ret, n, keydir, root, per_process=8000):
    """n accepted keys: minions key-0... signed in (auto_accept) by swarms of at most
    `per_process`, each stopped once all of its minions are signed in."""
    t0 = time.monotonic()
    for first in range(0, n, per_process):
        d = os.path.join(root, f"keys{first}")
        os.makedirs(d, exist_ok=True)
        sw, auth, _ = swarm_until_ready(["--master", ",".join(IPS), "--port", str(ret), "--count", str(min(per_process, n - first)),
                                         "--first", str(first), "--prefix", "key-", "--key-dir", keydir, "--distinct-keys", "1000"], d)
        stop(sw)
    return round(time.monotonic() - t0, 1)


def make_roots(d, mib):
    """`mib` MiB of random bytes in 16 MiB files (the last one smaller)."""
    os.makedirs(d, exist_ok=True)
    left, i = mib, 0
    while left > 0:
        size = min(16, left)
        with open(os.path.join(d, f"blob{i:04}.bin"), "wb") as f:
            for _ in range(size):
                f.write(os.urandom(1 << 20))
        left -= size
        i += 1


def fsync_floor(d, seconds=1.0, seq_mib=64):
    """fsyncs a second (4 KiB appended, then fdatasync) and sequential write + fsync
    MB/s, in `d` (the members' disk)."""
    p = os.path.join(d, "fsync-floor")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        os.write(fd, b"x" * 4096)
        os.fdatasync(fd)
        n += 1
    rate = n / (time.monotonic() - t0)
    os.ftruncate(fd, 0)
    block = os.urandom(1 << 20)
    t0 = time.monotonic()
    for _ in range(seq_mib):
        os.write(fd, block)
    os.fsync(fd)
    mbs = seq_mib * (1 << 20) / 1e6 / (time.monotonic() - t0)
    os.close(fd)
    os.remove(p)
    return {"fsync_per_s": round(rate), "seq_write_fsync_mb_s": round(mbs)}


def request_floor(n, per):
    """`halite-bench floor` for n connections and a blast of `per`: requests a second."""
    out = subprocess.run([binary("halite-bench"), "floor", "--conns", str(n), "--rounds", "3", "--blast", str(per)],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("floor") == "blast":
            return row
    return None


def one_master_blast(root, i, size, keydir):
    """The blast on one `salt-master` process (127.0.0.1, ports of its own, fresh state)."""
    m = Master("halite", os.path.join(root, f"one{i}"), 29720 + 10 * i)
    m.start()
    try:
        ev, threads, got = blast(["127.0.0.1"], m.ret, [m.proc.pid], size["minions"], size["per_minion"], keydir,
                                 os.path.join(root, f"one{i}"), m.conf)
        one = returns_row(ev, threads)
        one["last_job_stored"] = got
    finally:
        m.stop()
    return one


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, to check that it all runs")
    ap.add_argument("--out", default="")
    ap.add_argument("--keys", default=os.path.join(HOME, ".cache/halite/swarm-keys"))
    ap.add_argument("--keep", action="store_true", help="leave the state directories")
    ap.add_argument("--roots-mib", type=int, help="MiB of roots for the join (default 1024; --quick 64)")
    ap.add_argument("--join-keys", type=int, help="accepted keys for the join (default 100000; --quick 3000)")
    ap.add_argument("--history-returns", type=int, help="returns committed before the restart (default 1000000; --quick 20000)")
    ap.add_argument("--rounds", type=int, help="kill -9 rounds (default 10; --quick 3)")
    ap.add_argument("--pairs", type=int, default=1, help="returns: one-process and cluster blasts, alternated, this many times")
    ap.add_argument("--parts", default="returns,kill9,restart,join", help="which parts to run (comma separated)")
    a = ap.parse_args()
    q = a.quick
    parts = a.parts.split(",")
    size = {
        "minions": 1000 if q else 3000, "per_minion": 10 if q else 20, "rounds": 3 if q else 10,
        "history_returns": 20000 if q else 1000000, "history_minions": 1000 if q else 2000,
        "history_per_minion": 10 if q else 50, "log_max_entries": 5000 if q else 100000,
        "join_keys": 3000 if q else 100000, "join_roots_mib": 64 if q else 1024, "restarts": 3 if q else 5,
    }
    for k in ("roots_mib", "join_keys", "history_returns", "rounds"):
        if getattr(a, k) is not None:
            size[{"roots_mib": "join_roots_mib"}.get(k, k)] = getattr(a, k)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count(),
              "load_average_at_start": os.getloadavg(), "sizes": size}
    root = tempfile.mkdtemp(prefix="cluster-deployed-")
    ret, pub, pool = 29710, 29709, 29708
    result["floor"] = fsync_floor(root)
    result["floor"]["request_blast"] = request_floor(size["minions"], size["per_minion"])
    print(json.dumps({"floor": result["floor"]}), flush=True)

    roots_dir = lambda ip: os.path.join(root, ip, "roots")
    extra = lambda ip: f"cluster_max_log_size: {size['log_max_entries']}\nfile_roots:\n  base:\n    - {roots_dir(ip)}\n"
    for ip in IPS + [JOINER]:
        os.makedirs(roots_dir(ip), exist_ok=True)
    procs, confs = start_members(root, ret, pub, pool, extra)
    try:
        # Restart of the third member on the fresh cluster (nothing but its founding).
        empty = []
        for _ in range(size["restarts"] if "restart" in parts else 0):
            lead = IPS[leader_of(confs)]
            s, r, procs[2] = restart_timed(root, IPS[2], confs[2], ret, procs[2])
            empty.append({"serving_s": s, "ready_s": r, "leader_before": lead})
        result["restart_empty"] = empty
        print(json.dumps({"restart_empty": empty}), flush=True)

        # 1. The blast over the three members (the jobs published through the first),
        #    alternated with the same blast on one master process (the cluster idle).
        pairs = []
        for i in range(a.pairs if "returns" in parts else 0):
            one = one_master_blast(root, i, size, a.keys)
            print(json.dumps({"one_master": one}), flush=True)
            lead = IPS[leader_of(confs)]
            ev, threads, got = blast(IPS, ret, [p.pid for p in procs], size["minions"], size["per_minion"], a.keys,
                                     os.path.join(root, f"blast{i}"), confs[0])
            three = returns_row(ev, threads)
            three["last_job_stored_on_first"] = got
            three["members"] = IPS
            three["leader_before"] = lead
            print(json.dumps({"three_members": three}), flush=True)
            pairs.append({"one_master": one, "three_members": three,
                          "one_over_three": round(one["returns_per_s"] / max(1, three["returns_per_s"]), 2)})
        if pairs:
            result["returns"] = pairs[0] if len(pairs) == 1 else {
                "pairs": pairs, "one_over_three_median": statistics.median(p["one_over_three"] for p in pairs)}

        # 2. kill -9 of the leader.
        rounds = failover_rounds(root, procs, confs, ret, size["rounds"] if "kill9" in parts else 0, 2)
        took = [r["kill_to_answered_s"] for r in rounds if r["kill_to_answered_s"]]
        result["kill9"] = None if not rounds else {"probe": "salt -L <6 probe minions on the survivors> test.ping -t 2, back to back, through a follower",
                           "rounds": rounds, "median_s": round(statistics.median(took), 3) if took else None,
                           "max_s": max(took) if took else None, "unanswered_rounds": len(rounds) - len(took),
                           "floor": "cluster_election_min 750 ms (no leader before an election timeout)"}

        # 3. A history of returns, then the third member restarted.
        hist, done, first = [], 0, 100000
        while "restart" in parts and done < size["history_returns"]:
            # Each member's CPU a return, by thread, blast after blast: what grows with
            # the history, read apart from the machine's changing speed.
            ev, threads, _ = blast(IPS, ret, [p.pid for p in procs], size["history_minions"], size["history_per_minion"],
                                   a.keys, os.path.join(root, f"hist{done}"), confs[0], first=first, prefix="hist-")
            done += ev["acknowledged"]
            hist.append(returns_row(ev, threads))
            print(json.dumps({"history": {k: v for k, v in hist[-1].items() if k != "threads_cpu_s"}, "total": done}), flush=True)
        after = []
        for _ in range(size["restarts"] if "restart" in parts else 0):
            lead = IPS[leader_of(confs)]
            s, r, procs[2] = restart_timed(root, IPS[2], confs[2], ret, procs[2])
            after.append({"serving_s": s, "ready_s": r, "leader_before": lead})
        du = lambda p: sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(p) for f in fs)
        result["restart_history"] = None if not after else {"returns_committed": done, "blasts": hist, "restarts": after,
                                     "third_member_data_mib": round(du(os.path.join(root, IPS[2], "halite")) / 2**20, 1)}
        print(json.dumps({"restart_history": after}), flush=True)

        # 4. Join: keys signed in, roots synced, then a fourth member.
        if "join" in parts:
            keys_s = load_keys(ret, size["join_keys"], a.keys, root)
            make_roots(roots_dir(IPS[0]), size["join_roots_mib"])
            t0 = time.monotonic()
            synced = runner(confs[0], "cluster.sync_roots", timeout=3600)
            sync_s = round(time.monotonic() - t0, 2)
            if not (isinstance(synced, dict) and synced.get("status") == "committed"):
                print(f"warning: cluster.sync_roots did not commit: {synced}", file=sys.stderr)
            conf4 = write_member_conf(root, JOINER, IPS + [JOINER], ret, pub, pool,
                                      f"file_roots:\n  base:\n    - {roots_dir(JOINER)}\n")
            sr, rr, p4 = restart_timed(root, JOINER, conf4, ret)
            procs.append(p4)
            roots_mib = round(du(roots_dir(JOINER)) / 2**20, 1)
            keys_listed = subprocess.run([binary("salt-key"), "-c", conf4, "-L", "--out", "json"], capture_output=True, text=True).stdout
            try:
                n_keys = len(json.loads(keys_listed).get("minions", []))
            except ValueError:
                n_keys = None
            result["join"] = {"keys_signed_in": size["join_keys"], "keys_sign_in_s": keys_s, "roots_mib": size["join_roots_mib"],
                              "sync_roots_s": sync_s, "sync_roots": synced, "start_to_serving_s": sr, "start_to_ready_s": rr,
                              "joiner_keys_accepted": n_keys, "joiner_roots_mib": roots_mib,
                              "mb_s": round(roots_mib * 1.048576 / rr, 1) if rr else None,
                              "floor_seq_write_fsync_mb_s": result["floor"]["seq_write_fsync_mb_s"]}
            print(json.dumps({"join": result["join"]}), flush=True)
    finally:
        for p in procs:
            stop(p)
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    result["load_average_at_end"] = os.getloadavg()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps({k: result.get(k) for k in ("returns", "kill9")}, default=str)[:2000])


if __name__ == "__main__":
    main()
