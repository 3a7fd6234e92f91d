"""Bootstrap confidence intervals: over clips for a system's mean, and over per-clip differences
for a paired A/B comparison of two systems on the same clips.

Percentile bootstrap with a fixed seed, so a report is reproducible to the last digit. Weighted
means cover corpus-level ratios: WER = sum(errors) / sum(reference words) is the mean of per-clip
WERs weighted by reference words, and resampling clips keeps each clip's errors with its words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
_CHUNK = 2_000  # resamples per batch: bounds memory at CHUNK x clips indices


@dataclass(frozen=True)
class Estimate:
    """A mean with its bootstrap interval over `n` clips (low/high are NaN when n < 2)."""
    mean: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        return bool(self.n >= 2 and (self.low > 0 or self.high < 0))


def _clean(values, weights) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(values, dtype=np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    if v.shape != w.shape or v.ndim != 1:
        raise ValueError("values and weights must be 1-D arrays of the same length.")
    keep = np.isfinite(v) & np.isfinite(w) & (w > 0)
    return v[keep], w[keep]


def bootstrap_mean(values, weights=None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                   level: float = 0.95) -> Estimate:
    """(Weighted) mean of `values` and its percentile-bootstrap interval over clips.

    NaN values (a metric that could not be computed for a clip) are left out; `n` says how many
    clips remain.
    """
    if not 0 < level < 1:
        raise ValueError("level must lie between 0 and 1.")
    v, w = _clean(values, weights)
    n = len(v)
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    mean = float(np.sum(v * w) / np.sum(w))
    if n < 2:
        return Estimate(mean, float("nan"), float("nan"), n)
    rng = np.random.default_rng(seed)
    stats = []
    for start in range(0, n_resamples, _CHUNK):
        idx = rng.integers(0, n, size=(min(_CHUNK, n_resamples - start), n))
        stats.append(np.sum(v[idx] * w[idx], axis=1) / np.sum(w[idx], axis=1))
    stats = np.concatenate(stats)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return Estimate(mean, float(low), float(high), n)


def paired_difference(a, b, weights=None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                      level: float = 0.95) -> Estimate:
    """Mean of the per-clip differences a - b with its bootstrap interval (paired A/B).

    `a` and `b` hold one value per clip in the same clip order; clips where either is NaN are
    left out of both. Resampling differences, not each system separately, removes the variation
    between clips that both systems share, which is what makes paired intervals narrow.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError("paired comparison needs one value per clip from both systems.")
    return bootstrap_mean(a - b, weights, n_resamples=n_resamples, seed=seed, level=level)


MIN_CLIPS_FOR_VERDICT = 5  # fewer clips have too few distinct resamples for an interval to mean much


def verdict(delta: Estimate, higher_is_better: bool) -> str:
    """'better', 'worse' or 'no clear difference': whether the interval of a difference
    (system - baseline) lies entirely on one side of zero; 'too few clips' below
    MIN_CLIPS_FOR_VERDICT clips."""
    if delta.n < MIN_CLIPS_FOR_VERDICT:
        return "too few clips"
    if not delta.excludes_zero():
        return "no clear difference"
    return "better" if (delta.mean > 0) == higher_is_better else "worse"
