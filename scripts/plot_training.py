"""Loss curve and validation metrics of a training log (log.jsonl from scripts/train.py).

    python scripts/plot_training.py runs/r1/log.jsonl assets/model/training.png

A log may join several runs, each continuing the last: its "start" events after step 0 are marked.
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(log: str, out: str) -> None:
    rows = [json.loads(line) for line in open(log)]
    train = [r for r in rows if "loss" in r]
    val = [r for r in rows if "val_loss" in r]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot([r["step"] for r in train], [r["loss"] for r in train], lw=0.8, label="train (batch mean)")
    axes[0].plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="validation (t = 0.2/0.5/0.8)")
    axes[0].set(xlabel="step", ylabel="flow-matching loss", title="loss")
    axes[0].legend()
    if val and "val_x0_err_t1" in val[-1]:
        axes[1].plot([r["step"] for r in val], [r["val_x0_err_t1"] for r in val], "o-", label="model at t = 1")
        axes[1].axhline(val[-1]["obs_x0_err"], color="gray", ls="--", label="degraded input")
        axes[1].set(xlabel="step", ylabel="relative error", title="clean-latent estimate from conditions alone")
        axes[1].legend()
    else:
        axes[1].set_axis_off()
    axes[2].plot([r["step"] for r in val], [r["val_si_sdr"] for r in val], "o-", label="restored (8 steps)")
    if val:
        axes[2].axhline(val[-1]["input_si_sdr"], color="gray", ls="--", label="degraded input")
    axes[2].set(xlabel="step", ylabel="SI-SDR (dB)", title="validation SI-SDR")
    axes[2].legend()
    for r in rows:  # where a later run continued an earlier one (logs joined with steps offset)
        if r.get("event") == "start" and r["step"] > 0:
            for ax in axes[:3]:
                if ax.axison:
                    ax.axvline(r["step"], color="k", lw=0.6, ls=":")
            axes[0].annotate(f" {r.get('run', 'new run')}", (r["step"], axes[0].get_ylim()[1]), va="top", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
