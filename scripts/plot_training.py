"""Loss curve and validation metrics of a training log (log.jsonl from scripts/train.py).

    python scripts/plot_training.py runs/r1/log.jsonl assets/model/training.png

A log may join several runs, each starting with a "start" event (steps offset so that a run continuing
another starts where that one ended). Each run is drawn as its own line, so runs made side by side from
the same starting point (as r9 and r9-clean were, before being averaged) overlap instead of zigzagging.
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def runs(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The log split at its start events: (run name, its rows) in order."""
    out: list[tuple[str, list[dict]]] = []
    for r in rows:
        if r.get("event") == "start" or not out:
            out.append((r.get("run", f"run {len(out) + 1}"), []))
        out[-1][1].append(r)
    return out


def main(log: str, out: str) -> None:
    rows = [json.loads(line) for line in open(log)]
    parts = runs(rows)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    has_x0 = any("val_x0_err_t1" in r for r in rows)
    obs = next((r["obs_x0_err"] for r in reversed(rows) if "obs_x0_err" in r), None)
    inp = next((r["input_si_sdr"] for r in reversed(rows) if "input_si_sdr" in r), None)
    for i, (name, part) in enumerate(parts):
        c = colours[i % len(colours)]
        train = [r for r in part if "loss" in r]
        val = [r for r in part if "val_loss" in r]
        first = i == 0
        axes[0].plot([r["step"] for r in train], [r["loss"] for r in train], lw=0.6, color=c, alpha=0.6,
                     label="train (batch mean)" if first else None)
        axes[0].plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", ms=3, color=c,
                     label="validation (t = 0.2/0.5/0.8)" if first else None)
        if has_x0:
            v = [r for r in val if "val_x0_err_t1" in r]
            axes[1].plot([r["step"] for r in v], [r["val_x0_err_t1"] for r in v], "o-", ms=3, color=c,
                         label="model at t = 1" if first else None)
        axes[2].plot([r["step"] for r in val], [r["val_si_sdr"] for r in val], "o-", ms=3, color=c,
                     label="restored" if first else None)
    axes[0].set(xlabel="step", ylabel="flow-matching loss", title="loss")
    if has_x0:
        if obs is not None:
            axes[1].axhline(obs, color="gray", ls="--", label="degraded input")
        axes[1].set(xlabel="step", ylabel="relative error", title="clean-latent estimate from conditions alone")
        axes[1].legend()
    else:
        axes[1].set_axis_off()
    if inp is not None:
        axes[2].axhline(inp, color="gray", ls="--", label="degraded input")
    axes[2].set(xlabel="step", ylabel="SI-SDR (dB)", title="validation SI-SDR")
    axes[0].legend()
    axes[2].legend()
    lo, hi = axes[0].get_xlim()
    near = 0.09 * (hi - lo)  # a label's width, about: closer starts go on the next row down
    placed: list[tuple[float, int]] = []
    for i, (name, part) in enumerate(parts):  # where each later run starts, named
        step = part[0]["step"]
        if step == 0 and i == 0:
            continue
        for ax in axes:
            if ax.axison:
                ax.axvline(step, color="k", lw=0.6, ls=":")
        row = 0
        while any(r == row and abs(step - s) < near for s, r in placed):
            row += 1
        placed.append((step, row))
        top = axes[0].get_ylim()[1]
        axes[0].annotate(f" {name}", (step, top), xytext=(0, -10 * row), textcoords="offset points",
                         va="top", fontsize=8, color=colours[i % len(colours)])
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="a log.jsonl, or several runs' logs joined")
    ap.add_argument("out", help="the image to write (PNG)")
    args = ap.parse_args()
    main(args.log, args.out)
