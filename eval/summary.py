"""From per-clip rows to what the report shows: per-system means with intervals, paired
differences against the baseline, the same per degradation type, and sanity checks."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, Estimate, bootstrap_mean, paired_difference, verdict
from .columns import METRICS, MetricSpec
from .scoring import column_values


@dataclass
class MetricSummary:
    spec: MetricSpec
    absolute: dict[str, Estimate]                      # system -> mean [CI]
    delta: dict[str, Estimate]                         # system -> (system - baseline) [CI]
    by_group: dict[str, dict[str, Estimate]] = field(default_factory=dict)        # group -> system -> mean
    delta_by_group: dict[str, dict[str, Estimate]] = field(default_factory=dict)  # group -> system -> delta

    def verdict(self, system: str) -> str:
        return verdict(self.delta[system], self.spec.higher_is_better)


@dataclass
class Summary:
    systems: list[str]
    baseline: str
    n_clips: int
    metrics: list[MetricSummary]
    group_column: str | None
    groups: list[str]
    group_sizes: dict[str, int]
    checks: dict[str, dict[str, float]]     # system -> {'median_lag_ms', 'max_abs_length_diff_ms'}
    n_resamples: int
    seed: int


def _weights(rows: list[dict], system: str, spec: MetricSpec) -> np.ndarray | None:
    if spec.weight is None:
        return None
    return column_values(rows, system, spec.weight)


def summarise(rows: list[dict], systems: list[str], baseline: str, group_column: str | None = "degradation",
              n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Summary:
    """Means with bootstrap intervals for every metric present in `rows`, paired against `baseline`."""
    if baseline not in systems:
        raise ValueError(f"baseline {baseline!r} is not one of the systems ({', '.join(systems)}).")
    clip_ids = [r["clip_id"] for r in rows if r["system"] == baseline]
    if group_column is not None and not all(r.get(group_column) for r in rows):
        group_column = None
    groups = sorted({r[group_column] for r in rows if r["system"] == baseline}) if group_column else []
    group_of = [r[group_column] for r in rows if r["system"] == baseline] if group_column else []

    metrics = []
    for spec in METRICS:
        if not any(spec.key in r for r in rows):
            continue
        base = column_values(rows, baseline, spec.key)
        base_w = _weights(rows, baseline, spec)
        if not np.isfinite(base).any() and not any(np.isfinite(column_values(rows, s, spec.key)).any()
                                                   for s in systems):
            continue
        ms = MetricSummary(spec, {}, {})
        for system in systems:
            vals = column_values(rows, system, spec.key)
            w = _weights(rows, system, spec)
            ms.absolute[system] = bootstrap_mean(vals, w, n_resamples, seed)
            ms.delta[system] = paired_difference(vals, base, base_w, n_resamples, seed)
            for g in groups:
                sel = np.array([x == g for x in group_of])
                ms.by_group.setdefault(g, {})[system] = bootstrap_mean(
                    vals[sel], None if w is None else w[sel], n_resamples, seed)
                ms.delta_by_group.setdefault(g, {})[system] = paired_difference(
                    vals[sel], base[sel], None if base_w is None else base_w[sel], n_resamples, seed)
        metrics.append(ms)

    checks = {}
    for system in systems:
        lag = column_values(rows, system, "lag_ms") if any("lag_ms" in r for r in rows) else np.array([])
        lag = lag[np.isfinite(lag)]
        diff = np.abs(column_values(rows, system, "length_diff_ms"))
        diff = diff[np.isfinite(diff)]
        checks[system] = {"median_lag_ms": float(np.median(lag)) if len(lag) else math.nan,
                          "max_abs_length_diff_ms": float(diff.max()) if len(diff) else math.nan}
    sizes = {g: group_of.count(g) for g in groups}
    return Summary(systems, baseline, len(clip_ids), metrics, group_column, groups, sizes, checks,
                   n_resamples, seed)


def write_rows_csv(rows: list[dict], path: str | Path) -> None:
    """The per-clip table: one row per (clip, system), every metric and input column."""
    columns: list[str] = []
    for r in rows:
        for k in r:
            if k not in columns:
                columns.append(k)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _cell(r.get(k, "")) for k in columns})


def _cell(v):
    if isinstance(v, float):
        return "" if v != v else f"{v:.6g}"
    return v


def write_summary_csv(summary: Summary, path: str | Path) -> None:
    """Machine-readable summary: one row per (metric, group, system) with mean, interval and the
    paired difference against the baseline."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["metric", "group", "system", "n", "mean", "ci_low", "ci_high", "baseline",
                    "delta", "delta_ci_low", "delta_ci_high", "verdict"])
        for ms in summary.metrics:
            blocks = [("all", ms.absolute, ms.delta)] + [(g, ms.by_group[g], ms.delta_by_group[g])
                                                         for g in summary.groups]
            for group, absolute, delta in blocks:
                for system in summary.systems:
                    a, d = absolute[system], delta[system]
                    w.writerow([ms.spec.key, group, system, a.n, _cell(a.mean), _cell(a.low), _cell(a.high),
                                summary.baseline, _cell(d.mean), _cell(d.low), _cell(d.high),
                                verdict(d, ms.spec.higher_is_better) if system != summary.baseline else ""])
