#!/usr/bin/env python3
"""Plots docs/bench-data/swarm.json (written by swarm.py) into docs/img/swarm.png.

    python3 -m venv ~/.cache/halite/venv-plot && ~/.cache/halite/venv-plot/bin/pip install matplotlib
    ~/.cache/halite/venv-plot/bin/python benches/scripts/plot_swarm.py [SRC.json ...] [--out PNG] [--targets 8000] \
        [--blast returns.json] [--floor floor.jsonl] [--rsa-sign-us 819]

Several sources are plotted together (e.g. the Halite and the reference runs of a sweep).
The dashed lines are the targets at 500 minions, or those at 8,000 with
``--targets 8000``. ``--blast`` adds the master's own rate of returns (what
``returns.py`` writes) to the returns panel; ``--floor`` adds the machine's floor
(``halite-bench floor`` lines: the same traffic served by a process that only frames
bytes, the median over its runs at each size) to the ``test.ping`` and returns panels.
``--rsa-sign-us`` adds the sign-in's RSA floor: one RSA-2048 signature a first sign-in
(``openssl speed rsa2048``'s time), on all the cores at once.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import argparse  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("src", nargs="*", default=["docs/bench-data/swarm.json"])
ap.add_argument("--out", default="docs/img/swarm.png")
ap.add_argument("--targets", choices=["500", "8000"], default="500")
ap.add_argument("--blast", default="")
ap.add_argument("--floor", default="")
ap.add_argument("--rsa-sign-us", type=float, default=0)
a = ap.parse_args()
dst = a.out
loaded = [json.load(open(p)) for p in a.src]
data = loaded[0]
rows = [r for d in loaded for r in d["rows"]]
if a.blast:
    rows += [{"master": "blast", "minions": r["minions"], "returns_per_s": r["returns_per_s"]} for r in json.load(open(a.blast))["rows"] if r.get("returns_per_s")]
if a.floor:
    import statistics
    runs = [json.loads(line) for line in open(a.floor) if line.strip()]
    for conns in sorted({r["conns"] for r in runs}):
        row = {"master": "floor", "minions": conns}
        pings = [r["median_s"] for r in runs if r["conns"] == conns and r["floor"] == "ping"]
        blasts = [r["requests_per_s"] for r in runs if r["conns"] == conns and r["floor"] == "blast"]
        if pings:
            row["cli_ping_s"] = statistics.median(pings)
        if blasts:
            row["returns_per_s"] = statistics.median(blasts)
        rows.append(row)
if a.rsa_sign_us:
    cores = data.get("cores", 2)
    rows += [{"master": "rsa", "minions": n, "auth_s": n * a.rsa_sign_us / 1e6 / cores} for n in sorted({r["minions"] for r in rows})]
TARGETS = {"500": [0.4, None, 0.3, 40, 0.1], "8000": [2, None, 0.5, 100, None]}[a.targets]
# Styles that say what a series is: the floor and the blast are not masters under the swarm.
STYLE = {"floor": dict(color="black", linestyle=":", marker="x"), "rsa": dict(color="black", linestyle=":", marker="x"), "blast": dict(linestyle="-.", marker="s")}
COLOR = {"halite": "C0", "blast": "C0", "reference": "C1"}


def series(master, key):
    pts = sorted((r["minions"], r[key]) for r in rows if r["master"] == master and key in r)
    return [p[0] for p in pts], [p[1] for p in pts]


panels = [
    ("All minions signed in (s)", [("halite", "auth_s", "Halite"), ("reference", "auth_s", "reference 3008.5"), ("rsa", "auth_s", "RSA floor (a signature each)")], TARGETS[0]),
    ("Master CPU during sign-in (s)", [("halite", "auth_master_cpu_s", "Halite"), ("reference", "auth_master_cpu_s", "reference (14 processes)")], TARGETS[1]),
    ("salt '*' test.ping, all returns (s)", [("halite", "cli_ping_s", "Halite CLI"), ("reference", "cli_ping_s", "reference CLI"), ("reference", "local_client_ping_s", "reference LocalClient"), ("floor", "cli_ping_s", "machine floor (no protocol)")], TARGETS[2]),
    ("Memory with all connected (MiB)", [("halite", "rss_mib", "Halite RSS"), ("reference", "pss_mib", "reference PSS"), ("reference", "rss_mib", "reference RSS (sum)")], TARGETS[3]),
    ("Cold start to serving, N keys (s)", [("halite", "cold_start_with_keys_s", "Halite"), ("reference", "cold_start_with_keys_s", "reference")], TARGETS[4]),
    ("Returns acknowledged per second", [("halite", "returns_per_s", "Halite"), ("blast", "returns_per_s", "Halite, its own rate (blast)"), ("reference", "returns_per_s", "reference"), ("floor", "returns_per_s", "machine floor (no protocol)")], 50000 if a.targets == "8000" else None),
]
fig, grid = plt.subplots(2, 3, figsize=(13, 7.5))
axes = list(grid.flat)
for ax, (title, lines, target) in zip(axes, panels):
    drawn, seen = 0, set()
    for master, key, label in lines:
        x, y = series(master, key)
        if x:
            # One colour a master in every panel; a master's second series in a panel
            # (the reference's LocalClient, its summed RSS) the next colour.
            style = dict(STYLE.get(master, dict(marker="o")))
            style.setdefault("color", COLOR.get(master, "C2") if master not in seen else "C2")
            seen.add(master)
            ax.plot(x, y, label=label, **style)
            drawn += 1
    if not drawn:
        ax.axis("off")
        continue
    if target:
        ax.axhline(target, color="grey", linestyle="--", linewidth=0.8, label=f"target {target}")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("minions")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
fig.suptitle(f"Halite vs salt-master 3008.5 under halite-swarm ({data['cores']} cores, {data['date']})", fontsize=10)
fig.tight_layout()
fig.savefig(dst, dpi=110)
print(dst)
