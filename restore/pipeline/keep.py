"""Keeping the input where the restoration agrees with it.

A one-step restoration is a conditional mean: even where the input was already clean it redraws the
speech a little (pocketsphinx reads ~30% of the shipped model's words on clean input differently from
the input itself). Where the input is reliable, the input is the better estimate of the speech.

Per time-frequency bin of the codec's spectrum, with S the restoration (levelled to the input by
least squares, per window) and R = Y - S what it took out of the input Y:

    out = S + b R,   b = |S|^2 / (|S|^2 + 10^(keep_db / 10) |R|^2)

(both powers averaged over 3 x 3 neighbouring bins). Where what was removed lies more than `keep_db`
below the restoration (a local SNR above keep_db), b -> 1 and the input comes back, its own fine
structure and phase included; where the restoration removed or added much (noise, reverberation tails,
a missing band), b -> 0 and the restoration stays. Higher keep_db keeps less of the input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_TINY = 1e-20
SMOOTH = 3  # bins (frames and frequencies) the powers are averaged over


def _power(z: torch.Tensor) -> torch.Tensor:
    """|z|^2 without the square root."""
    return z.real.square() + z.imag.square()


def _local(p: torch.Tensor) -> torch.Tensor:
    """p (B, T, F) averaged over SMOOTH x SMOOTH neighbouring bins."""
    return F.avg_pool2d(p[:, None], SMOOTH, 1, SMOOTH // 2, count_include_pad=False)[:, 0]


def keep_input(codec, obs: torch.Tensor, est: torch.Tensor, keep_db: float) -> torch.Tensor:
    """obs, est: latents (B, T, D) of the input and the restoration -> latents of the blend."""
    y, s = codec.spectrum(obs), codec.spectrum(est)
    s2, dims = _power(s), tuple(range(1, y.ndim))
    g = ((y * s.conj()).real.sum(dims) / s2.sum(dims).clamp_min(_TINY)).clamp(0.1, 10.0)
    g = g.reshape(-1, *([1] * (y.ndim - 1)))
    s = s * g
    r = y - s
    num = _local(s2 * g.square())
    b = num / (num + 10.0 ** (keep_db / 10.0) * _local(_power(r))).clamp_min(_TINY)
    return codec.latents((s + b * r) / g).to(est.dtype)
