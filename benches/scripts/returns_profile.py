#!/usr/bin/env python3
"""Where a blast's master CPU goes, split into the floor's work (the kernel's sends and
receives), the work a return needs (`halite-bench work`'s steps) and the rest (how the
master carries it: tasks, queues, raft's bookkeeping, routing).

The samples of a `perf record -g` of the master over a blast (`HALITE_PERF_OUT=FILE
returns.py ...`), each put in the first part below whose frames its stack holds (a part
may also ask for the sampled thread); as shares of all samples and, given the master's
CPU-seconds over the samples' window and the returns in it, as microseconds a return.
The publishes of the blast's jobs are in the window (their own part).

    perf script -i PERF_OUT -F comm,tid,ip,sym,dso > STACKS
    returns_profile.py STACKS [CPU_SECONDS RETURNS]
"""
import collections
import sys

# (part, kind, thread prefix or None, frames any of which the stack holds)
PARTS = [
    ("publishes' fan-out (send, framing, the subscribers' tasks)", "publish", None, ["PubSocketBackend", "publishing::", "Publisher"]),
    ("log: raft-engine append and sync", "work", "raft-node", ["RaftLog::append"]),
    ("log: entries read back and applied to RocksDB", "work", "raft-node", ["apply_entries", "LogEntry::from_raft"]),
    ("log: the rest (raft, proposals, callers answered)", "rest", "raft-node", [""]),
    ("RocksDB's background threads (flush, compaction)", "work", "rocksdb", [""]),
    ("request read: the kernel's receive", "floor", None, ["__x64_sys_recvfrom"]),
    ("request opened (envelope, HMAC, AES, the load read)", "work", None, ["envelope::open_aes", "envelope::decode", "opened::open"]),
    ("request read: the rest (zeromq codec, fair queue, intake reader)", "rest", "salt-master", [""]),
    ("reply sent: the kernel's send", "floor", None, ["__x64_sys_sendto"]),
    ("reply sealed, the return's record encoded", "work", None, ["seal_reply", "Record::encode", "encode_batch"]),
    ("reply routed and framed (zeromq ROUTER send, the peer's writer task)", "rest", None, ["RouterSendHalf", "send_to_peer", "FramedWrite", "GenericSocketBackend"]),
    ("handlers: the rest (settle, claims, tok memo, propose, events, the task)", "rest", None, ["requests::request", "requests::settle"]),
    ("intake starter (shares, permits, spawn)", "rest", None, ["intake::starter"]),
    ("tokio scheduling and the rest", "rest", None, [""]),
]


def samples(path):
    """(thread name, stack text) of each sample of `perf script`'s output."""
    comm, stack = None, []
    for line in open(path, errors="replace"):
        if not line.strip():
            if comm is not None:
                yield comm, "\n".join(stack)
            comm, stack = None, []
        elif line.startswith(("\t", " ")):
            stack.append(line.strip())
        else:
            if comm is not None:
                yield comm, "\n".join(stack)
            comm, stack = line.split()[0], []
    if comm is not None:
        yield comm, "\n".join(stack)


def main():
    parts, total = collections.Counter(), 0
    for comm, text in samples(sys.argv[1]):
        total += 1
        name = next(n for n, _, thread, pats in PARTS if (thread is None or comm.startswith(thread)) and any(p in text for p in pats))
        parts[name] += 1
    cpu = float(sys.argv[2]) if len(sys.argv) > 3 else None
    returns = int(sys.argv[3]) if len(sys.argv) > 3 else None
    per = (lambda n: f"{1e6 * cpu * n / total / returns:6.2f} us") if cpu else (lambda n: "")
    print(f"{total} samples" + (f", {cpu} CPU-s, {returns} returns" if cpu else ""))
    kinds = collections.Counter()
    for name, kind, _, _ in PARTS:
        kinds[kind] += parts[name]
        print(f"{100 * parts[name] / max(total, 1):6.2f} %  {per(parts[name])}  [{kind}] {name}")
    print("by kind:")
    for kind in ("floor", "work", "rest", "publish"):
        print(f"{100 * kinds[kind] / max(total, 1):6.2f} %  {per(kinds[kind])}  {kind}")


if __name__ == "__main__":
    main()
