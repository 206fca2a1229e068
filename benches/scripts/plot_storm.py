#!/usr/bin/env python3
"""Plots a mixed storm (`storm.py --scenario mixed`: a blast of returns from minions
already signed in while 8,000 others sign in for the first time) over time, the request
port in FIFO mode against its shares: returns stored and minions signed in, one line a
run, from the runs' `series` (sampled from the master's metrics during the storm).

    ~/.cache/halite/venv-plot/bin/python benches/scripts/plot_storm.py \
        [docs/bench-data/storm-mixed-8k.jsonl] [--out docs/img/storm-mixed-8k.png]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"fifo": ("tab:red", "FIFO (halite_request_fifo: True)"), "fair": ("tab:blue", "shares (the default)")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src", nargs="?", default="docs/bench-data/storm-mixed-8k.jsonl")
    ap.add_argument("--out", default="docs/img/storm-mixed-8k.png")
    a = ap.parse_args()
    runs = [json.loads(line) for line in open(a.src) if line.strip()]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    labelled = set()
    for r in runs:
        colour, label = STYLE.get(r["mode"], ("tab:gray", r["mode"]))
        t = [0.0] + [p["t"] for p in r["series"]]
        returns = [0] + [p["returns"] for p in r["series"]]
        signed = [0] + [p["signed_in"] for p in r["series"]]
        show = label if r["mode"] not in labelled else None
        labelled.add(r["mode"])
        left.plot(t, returns, color=colour, label=show, linewidth=1.4)
        right.plot(t, signed, color=colour, label=show, linewidth=1.4)
    total = runs[0]["returners"] * runs[0]["per_minion"] if runs else 0
    left.set_title(f"returns stored (a blast of {total:,})")
    right.set_title(f"minions signed in (a storm of {runs[0]['signing_in']:,})" if runs else "minions signed in")
    for ax in (left, right):
        ax.set_xlabel("seconds from the storm's start")
        ax.grid(alpha=0.3)
    left.legend(loc="lower right")
    fig.suptitle("A blast of returns during 8,000 first sign-ins: one line a run")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
