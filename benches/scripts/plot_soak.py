#!/usr/bin/env python3
"""Plots the master's memory over a soak (`soak.py`'s JSON): RSS and its anonymous part
against minutes, one line pair per file, with the band of ±10 % around the median RSS
after the warm-up (the bound RSS is held to).

    python3 -m venv ~/.cache/halite/venv-plot && ~/.cache/halite/venv-plot/bin/pip install matplotlib
    ~/.cache/halite/venv-plot/bin/python benches/scripts/plot_soak.py SOAK.json[=LABEL] ... \\
        [--warmup-min 10] [--out docs/img/soak.png]

The first file's band is drawn; the figures printed are its median RSS after the
warm-up and how far the samples stray from it.
"""

import argparse
import json
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(arg):
    path, _, label = arg.partition("=")
    with open(path) as f:
        d = json.load(f)
    return d, label or path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", help="soak.py outputs, each optionally =LABEL")
    ap.add_argument("--warmup-min", type=float, default=10.0)
    ap.add_argument("--out", default="docs/img/soak.png")
    args = ap.parse_args()

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, arg in enumerate(args.files):
        d, label = load(arg)
        t = [s["s"] / 60 for s in d["samples"]]
        rss = [s["rss_mib"] for s in d["samples"]]
        anon = [s["anon_mib"] for s in d["samples"]]
        color = f"C{i}"
        ax.plot(t, rss, color=color, label=f"{label}: RSS")
        ax.plot(t, anon, color=color, linestyle=":", label=f"{label}: anonymous")
        after = [r for x, r in zip(t, rss) if x > args.warmup_min]
        if i == 0 and after:
            med = statistics.median(after)
            ax.axhspan(med * 0.9, med * 1.1, color=color, alpha=0.08, label="±10 % of the median RSS after warm-up")
            ax.axvline(args.warmup_min, color="grey", linewidth=0.6)
            print(json.dumps({
                "file": label,
                "median_rss_after_warmup_mib": med,
                "min_mib": min(after),
                "max_mib": max(after),
                "max_dev_from_median_pct": round(100 * max(abs(r - med) for r in after) / med, 1),
                "jobs": d.get("jobs"),
                "jobs_with_missing_returns": d.get("jobs_with_missing_returns"),
            }))
    d0, _ = load(args.files[0])
    ax.set_title(f"Halite master memory, {d0['minions']:,} simulated minions, a test.ping every {d0['interval_s']:g} s")
    ax.set_xlabel("minutes")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
