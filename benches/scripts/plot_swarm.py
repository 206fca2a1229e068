#!/usr/bin/env python3
"""Plots docs/bench-data/swarm.json (written by swarm.py) into docs/img/swarm.png.

    python3 -m venv ~/.cache/halite/venv-plot && ~/.cache/halite/venv-plot/bin/pip install matplotlib
    ~/.cache/halite/venv-plot/bin/python benches/scripts/plot_swarm.py
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else "docs/bench-data/swarm.json"
dst = sys.argv[2] if len(sys.argv) > 2 else "docs/img/swarm.png"
data = json.load(open(src))
rows = data["rows"]


def series(master, key):
    pts = sorted((r["minions"], r[key]) for r in rows if r["master"] == master and key in r)
    return [p[0] for p in pts], [p[1] for p in pts]


panels = [
    ("All minions signed in (s)", [("halite", "auth_s", "Halite"), ("reference", "auth_s", "reference 3008.5")], 0.4),
    ("Master CPU during sign-in (s)", [("halite", "auth_master_cpu_s", "Halite"), ("reference", "auth_master_cpu_s", "reference (14 processes)")], None),
    ("salt '*' test.ping, all returns (s)", [("halite", "cli_ping_s", "Halite CLI"), ("reference", "cli_ping_s", "reference CLI"), ("reference", "local_client_ping_s", "reference LocalClient")], 0.3),
    ("Memory with all connected (MiB)", [("halite", "rss_mib", "Halite RSS"), ("reference", "pss_mib", "reference PSS"), ("reference", "rss_mib", "reference RSS (sum)")], 40),
    ("Cold start to serving, N keys (s)", [("halite", "cold_start_with_keys_s", "Halite"), ("reference", "cold_start_with_keys_s", "reference")], 0.1),
]
fig, grid = plt.subplots(2, 3, figsize=(13, 7.5))
axes = list(grid.flat)
axes[-1].axis("off")
for ax, (title, lines, target) in zip(axes, panels):
    for master, key, label in lines:
        x, y = series(master, key)
        if x:
            ax.plot(x, y, marker="o", label=label)
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
