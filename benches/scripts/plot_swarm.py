#!/usr/bin/env python3
"""Plots docs/bench-data/swarm.json (written by swarm.py) into docs/img/swarm.png.

    python3 -m venv ~/.cache/halite/venv-plot && ~/.cache/halite/venv-plot/bin/pip install matplotlib
    ~/.cache/halite/venv-plot/bin/python benches/scripts/plot_swarm.py [SRC.json ...] [--out PNG] [--targets issue12]

Several sources are plotted together (e.g. the Halite and the reference runs of a sweep).
The dashed lines are issue 3's targets at 500 minions, or issue 12's at 8,000 with
``--targets issue12``.
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
ap.add_argument("--targets", choices=["issue3", "issue12"], default="issue3")
a = ap.parse_args()
dst = a.out
loaded = [json.load(open(p)) for p in a.src]
data = loaded[0]
rows = [r for d in loaded for r in d["rows"]]
TARGETS = {"issue3": [0.4, None, 0.3, 40, 0.1], "issue12": [2, None, 0.5, 100, None]}[a.targets]


def series(master, key):
    pts = sorted((r["minions"], r[key]) for r in rows if r["master"] == master and key in r)
    return [p[0] for p in pts], [p[1] for p in pts]


panels = [
    ("All minions signed in (s)", [("halite", "auth_s", "Halite"), ("reference", "auth_s", "reference 3008.5")], TARGETS[0]),
    ("Master CPU during sign-in (s)", [("halite", "auth_master_cpu_s", "Halite"), ("reference", "auth_master_cpu_s", "reference (14 processes)")], TARGETS[1]),
    ("salt '*' test.ping, all returns (s)", [("halite", "cli_ping_s", "Halite CLI"), ("reference", "cli_ping_s", "reference CLI"), ("reference", "local_client_ping_s", "reference LocalClient")], TARGETS[2]),
    ("Memory with all connected (MiB)", [("halite", "rss_mib", "Halite RSS"), ("reference", "pss_mib", "reference PSS"), ("reference", "rss_mib", "reference RSS (sum)")], TARGETS[3]),
    ("Cold start to serving, N keys (s)", [("halite", "cold_start_with_keys_s", "Halite"), ("reference", "cold_start_with_keys_s", "reference")], TARGETS[4]),
    ("Returns acknowledged per second", [("halite", "returns_per_s", "Halite"), ("reference", "returns_per_s", "reference")], None),
]
fig, grid = plt.subplots(2, 3, figsize=(13, 7.5))
axes = list(grid.flat)
for ax, (title, lines, target) in zip(axes, panels):
    drawn = 0
    for master, key, label in lines:
        x, y = series(master, key)
        if x:
            ax.plot(x, y, marker="o", label=label)
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
