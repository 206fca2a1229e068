#!/usr/bin/env python3
"""Where a sign-in storm's master CPU goes: the samples of a `perf record -g` of the
master (`signin.py N BINDIR PORT PERF_OUT`), each put in the first part below whose
frames its stack holds, as shares of the samples and, given the run's master CPU-seconds,
as CPU-seconds. The key view's part is split further: the kernel's inode allocation
(`find_inode_bit`) apart from the directory calls.

    perf script -i PERF_OUT -F comm,tid,ip,sym,dso > STACKS
    signin_profile.py STACKS [MASTER_CPU_SECONDS]
"""
import collections
import sys

PARTS = [
    ("RSA signature (the floor)", ["metrics::rsa_private"]),
    ("OAEP encryptions (aes, session: public-key operations)", ["encrypt_oaep"]),
    ("minion key PEM parse", ["PublicKey::from_pem"]),
    ("key view: localfs files", ["LocalfsKeys", "localfs::syncfs"]),
    ("key view: other", ["halite_storage::views"]),
    ("state machine apply (RocksDB)", ["StateMachine", "rocksdb"]),
    ("raft log, group commit", ["raft_engine", "RaftLog", "halite_replication"]),
    ("session journal", ["Sessions::install"]),
    ("salt/auth event", ["bus::Bus::fire", "events::event", "eventing"]),
    ("auth decision, the rest (reply encoding, session key)", ["req::auth"]),
    ("request opened and classed", ["class_of", "req::open", "envelope::decode"]),
    ("sign-in answers kept (signins.rs)", ["signins::"]),
    ("request port, the rest (settle, intake, reply)", ["request_port"]),
    ("TCP connections (zeromq accept, handshake, reply sends, close; mostly kernel)", ["begin_accept_bound", "peer_connected", "bind_inner"]),
    ("zeromq, the rest", ["zeromq"]),
    ("tokio blocking pool (hand-offs, thread switches)", ["blocking::pool"]),
    ("tokio scheduler", ["tokio::runtime"]),
]
LOCALFS = ["linkat", "rename", "tempfile_in", "link_new", "set_times", "set_permissions", "move_regular"]


def stacks(path):
    stack = []
    for line in open(path, errors="replace"):
        if not line.strip():
            if stack:
                yield "\n".join(stack)
            stack = []
        elif line.startswith(("\t", " ")):
            stack.append(line.strip())
        else:
            if stack:
                yield "\n".join(stack)
            stack = []
    if stack:
        yield "\n".join(stack)


parts, localfs, total = collections.Counter(), collections.Counter(), 0
for text in stacks(sys.argv[1]):
    total += 1
    name = next((n for n, pats in PARTS if any(p in text for p in pats)), "other")
    parts[name] += 1
    if name.startswith("key view: localfs"):
        if "find_inode_bit" in text:
            localfs["inode allocation (find_inode_bit)"] += 1
        else:
            localfs[next((k for k in LOCALFS if k in text), "other")] += 1
cpu = float(sys.argv[2]) if len(sys.argv) > 2 else None
print(f"samples {total}")
for name, c in parts.most_common():
    print(f"{100 * c / total:6.1f}%  {name}" + (f"  ~{cpu * c / total:.2f} CPU-s" if cpu else ""))
print("key view: localfs files, by call (samples):")
for name, c in localfs.most_common():
    print(f"  {c:6d}  {name}")
