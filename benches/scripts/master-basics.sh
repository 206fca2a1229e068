#!/usr/bin/env bash
# Measures the master's cold start (process start → admin socket accepting), its RSS
# with one real salt-minion 3008.5 connected, and `salt test.ping` latency through the
# CLI (50 runs). Needs release binaries and the reference venv:
#   cargo build --release -p halite-master -p halite-tools && scripts/setup-reference.sh
set -euo pipefail
B="${CARGO_TARGET_DIR:-$HOME/.cache/halite/target}/release"
V="${HALITE_SALT_VENV:-$HOME/.cache/halite/venv-salt-3008.5}"
T=$(mktemp -d)
trap 'kill $MP $NP 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$T"' EXIT
mkdir -p "$T/mconf" "$T/minion/conf"
cat > "$T/mconf/master" <<CFG
root_dir: $T/m
interface: 127.0.0.1
publish_port: 25505
ret_port: 25506
pidfile: $T/m/master.pid
halite_data_dir: $T/m/data
auto_accept: True
CFG
cat > "$T/minion/conf/minion" <<CFG
id: bench1
master: 127.0.0.1
master_port: 25506
root_dir: $T/minion
acceptance_wait_time: 1
multiprocessing: False
user: root
CFG
MP=0; NP=0
"$B/salt-master" -c "$T/mconf" -l warning 2>/dev/null & MP=$!; sleep 1; kill $MP; wait $MP 2>/dev/null || true
python3 - "$B" "$T" <<'PY'
import subprocess, sys, time, socket
b, t = sys.argv[1], sys.argv[2]
for _ in range(3):
    start = time.time()
    p = subprocess.Popen([f"{b}/salt-master", "-c", f"{t}/mconf", "-l", "warning"])
    while True:
        try:
            s = socket.socket(socket.AF_UNIX); s.connect(f"{t}/m/var/run/salt/master/halite-admin.sock"); s.close(); break
        except OSError:
            time.sleep(0.001)
    print("cold start to serving: %.1f ms" % ((time.time() - start) * 1000))
    p.terminate(); p.wait()
PY
"$B/salt-master" -c "$T/mconf" -l warning 2>/dev/null & MP=$!
"$V/bin/salt-minion" -c "$T/minion/conf" -l warning >/dev/null 2>&1 & NP=$!
for _ in $(seq 1 120); do "$B/salt" -c "$T/mconf" bench1 test.ping --out json -t 2 2>/dev/null | grep -q true && break; sleep 0.5; done
python3 - "$B" "$T" "$MP" <<'PY'
import subprocess, sys, time, statistics
b, t, pid = sys.argv[1], sys.argv[2], sys.argv[3]
ts = []
for _ in range(50):
    s = time.time()
    out = subprocess.run([f"{b}/salt", "-c", f"{t}/mconf", "bench1", "test.ping", "--out", "json"], capture_output=True, text=True).stdout
    assert "true" in out, out
    ts.append((time.time() - s) * 1000)
ts.sort()
print("test.ping via CLI, 50 runs: median %.1f ms, p90 %.1f ms, min %.1f ms" % (statistics.median(ts), ts[44], ts[0]))
print(" ".join(l.split()[0] + " " + l.split()[1] + " kB" for l in open(f"/proc/{pid}/status") if l.startswith(("VmRSS", "VmHWM"))))
PY
