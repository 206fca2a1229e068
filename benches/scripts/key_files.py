#!/usr/bin/env python3
"""The file-system calls of the `localfs_key` view for 8,000 first sign-ins, alone:
CPU-seconds (user + system) of this process to write 8,000 small key files into a
fresh `minions/` directory, each after the two `lstat`s of the other state directories
that `set_key` makes, in the two ways `storage/src/keys/localfs.rs` can write one:

- `rename`: a temporary name made (`O_CREAT|O_EXCL`), written, mtime and mode set,
  renamed into place;
- `o_tmpfile`: a file without a name (`O_TMPFILE`), written, mtime and mode set, linked
  in (`linkat` of `/proc/self/fd/N`).

Alternated, ROUNDS rounds, under DIR (a directory on the file system to measure):

    key_files.py DIR [ROUNDS]
"""
import ctypes
import os
import resource
import shutil
import sys
import tempfile

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_SYMLINK_FOLLOW = -100, 0x400
DATA = b"-----BEGIN PUBLIC KEY-----\n" + b"A" * 400 + b"\n-----END PUBLIC KEY-----"


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rename_way(d, i):
    tmp = os.path.join(d, f".halite-tmp-{i:08x}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, DATA)
    os.utime(fd, ns=(1, 1))
    os.fchmod(fd, 0o600)
    os.close(fd)
    os.rename(tmp, os.path.join(d, f"m{i}"))


def link_way(d, i):
    fd = os.open(d, os.O_WRONLY | os.O_TMPFILE, 0o600)
    os.write(fd, DATA)
    os.utime(fd, ns=(1, 1))
    os.fchmod(fd, 0o600)
    if libc.linkat(AT_FDCWD, f"/proc/self/fd/{fd}".encode(), AT_FDCWD, os.path.join(d, f"m{i}").encode(), AT_SYMLINK_FOLLOW) != 0:
        raise OSError(ctypes.get_errno(), "linkat")
    os.close(fd)


base = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
made = []
for r in range(rounds):
    for name, write in (("rename", rename_way), ("o_tmpfile", link_way)):
        root = tempfile.mkdtemp(dir=base)
        made.append(root)
        d = os.path.join(root, "minions")
        for sub in ("minions", "minions_pre", "minions_rejected"):
            os.mkdir(os.path.join(root, sub))
        c0 = cpu()
        for i in range(8000):
            for sub in ("minions_pre", "minions_rejected"):
                try:
                    os.lstat(os.path.join(root, sub, f"m{i}"))
                except FileNotFoundError:
                    pass
            write(d, i)
        print(f"{base} round {r} {name}: {cpu() - c0:.3f} CPU-s", flush=True)
# Removed only at the end: on ext4 without a journal a new inode skips those freed in
# the last minute, so removing a round's files would slow the next round's writes.
for root in made:
    shutil.rmtree(root)
