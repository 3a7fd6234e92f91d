"""Figures for the report: metric bars with 95% intervals, paired differences against the baseline
(overall and per degradation type), and spectrogram panels of a few clips."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .audio import load_audio  # noqa: E402
from .bootstrap import Estimate  # noqa: E402
from .summary import Summary  # noqa: E402

_BETTER, _WORSE, _UNCLEAR = "#2e8b57", "#c0392b", "#9e9e9e"


def _colours(systems: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {s: cmap(i % 10) for i, s in enumerate(systems)}


def _errorbar(est: Estimate, scale: float) -> tuple[float, list[float]]:
    if est.n < 2:
        return est.mean * scale, [0.0, 0.0]
    return est.mean * scale, [max(0.0, (est.mean - est.low) * scale), max(0.0, (est.high - est.mean) * scale)]


def _grid(n: int, width: float = 4.0, height: float = 3.0):
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def metric_bars(summary: Summary, path: str | Path) -> Path:
    """One panel per metric: the mean of each system with its 95% bootstrap interval."""
    colours = _colours(summary.systems)
    fig, axes = _grid(len(summary.metrics))
    for ax, ms in zip(axes, summary.metrics):
        systems = [s for s in summary.systems if ms.absolute[s].n > 0]
        for i, s in enumerate(systems):
            y, err = _errorbar(ms.absolute[s], ms.spec.scale)
            ax.bar(i, y, color=colours[s], yerr=np.array(err)[:, None], capsize=4)
        ax.set_xticks(range(len(systems)), systems, rotation=30, ha="right")
        unit = f" ({ms.spec.unit})" if ms.spec.unit else ""
        ax.set_title(f"{ms.spec.label}{unit} {ms.spec.arrow}")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"Means over {summary.n_clips} clips with 95% bootstrap intervals (↑ / ↓: better)")
    fig.tight_layout()
    return _save(fig, path)


def delta_bars(summary: Summary, path: str | Path) -> Path:
    """One panel per metric: each system minus the baseline, paired per clip, with its interval;
    green when the interval says better, red when it says worse, grey when it cannot tell."""
    others = [s for s in summary.systems if s != summary.baseline]
    fig, axes = _grid(len(summary.metrics))
    for ax, ms in zip(axes, summary.metrics):
        systems = [s for s in others if ms.delta[s].n > 0]
        for i, s in enumerate(systems):
            y, err = _errorbar(ms.delta[s], ms.spec.scale)
            colour = {"better": _BETTER, "worse": _WORSE}.get(ms.verdict(s), _UNCLEAR)
            ax.bar(i, y, color=colour, yerr=np.array(err)[:, None], capsize=4)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(systems)), systems, rotation=30, ha="right")
        unit = f" ({ms.spec.unit})" if ms.spec.unit else ""
        ax.set_title(f"Δ {ms.spec.label}{unit} {ms.spec.arrow}")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"Paired difference to '{summary.baseline}' per clip, 95% intervals "
                 "(green better, red worse, grey unclear)")
    fig.tight_layout()
    return _save(fig, path)


def delta_by_group(summary: Summary, path: str | Path, metric_keys: list[str] | None = None) -> Path | None:
    """Per degradation type: each system minus the baseline with intervals, one row per metric."""
    if not summary.groups:
        return None
    chosen = [ms for ms in summary.metrics if metric_keys is None or ms.spec.key in metric_keys]
    others = [s for s in summary.systems if s != summary.baseline]
    if not chosen or not others:
        return None
    colours = _colours(summary.systems)
    fig, axes = plt.subplots(len(chosen), 1, figsize=(max(8, 1.1 * len(summary.groups) * len(others) / 2 + 4),
                                                       2.8 * len(chosen)), squeeze=False)
    width = 0.8 / len(others)
    for ax, ms in zip(axes[:, 0], chosen):
        for j, s in enumerate(others):
            xs, ys, errs = [], [], []
            for i, g in enumerate(summary.groups):
                est = ms.delta_by_group[g][s]
                if est.n == 0:
                    continue
                y, err = _errorbar(est, ms.spec.scale)
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(y)
                errs.append(err)
            if xs:
                ax.bar(xs, ys, width=width, color=colours[s], label=s,
                       yerr=np.array(errs).T, capsize=2, error_kw={"lw": 0.8})
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(summary.groups)),
                      [f"{g}\n(n={summary.group_sizes[g]})" for g in summary.groups])
        unit = f" ({ms.spec.unit})" if ms.spec.unit else ""
        ax.set_ylabel(f"Δ {ms.spec.label}{unit} {ms.spec.arrow}", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(fontsize=8, ncol=len(others))
    fig.suptitle(f"Difference to '{summary.baseline}' per {summary.group_column}, 95% intervals")
    fig.tight_layout()
    return _save(fig, path)


def spectrogram_panel(clip_id: str, files: dict[str, Path], path: str | Path,
                      captions: dict[str, str] | None = None) -> Path:
    """Stacked log-magnitude spectrograms of one clip, one row per version (clean, degraded,
    systems), on one shared colour scale so levels compare across rows."""
    specs = {}
    for name, f in files.items():
        x = load_audio(f)
        n_fft, hop = 512, 128
        frames = np.lib.stride_tricks.sliding_window_view(np.pad(x, (n_fft // 2, n_fft // 2)), n_fft)[::hop]
        mag = np.abs(np.fft.rfft(frames * np.hanning(n_fft), axis=1)).T
        specs[name] = 20 * np.log10(mag + 1e-6)
    top = max(s.max() for s in specs.values())
    fig, axes = plt.subplots(len(specs), 1, figsize=(9, 1.9 * len(specs)), sharex=True, squeeze=False)
    for ax, (name, s) in zip(axes[:, 0], specs.items()):
        duration = s.shape[1] * 128 / 16000
        im = ax.imshow(s, origin="lower", aspect="auto", cmap="magma", vmin=top - 80, vmax=top,
                       extent=(0, duration, 0, 8))
        caption = (captions or {}).get(name, "")
        ax.set_title(f"{name}  {caption}".strip(), fontsize=9, loc="left")
        ax.set_ylabel("kHz")
    axes[-1, 0].set_xlabel("seconds")
    fig.colorbar(im, ax=axes[:, 0].tolist(), label="dB", shrink=0.8)
    fig.suptitle(clip_id, fontsize=10)
    return _save(fig, path)


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
