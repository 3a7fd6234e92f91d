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

A band-limited input (a phone line, a low-bitrate codec, a resampled file) carries its speech intact
below its cut-off, yet the one-step estimate redraws it there too, and the recogniser loses words to
that. With `band_db` given, the bins below a window's cut-off are kept at that level instead of
keep_db. The cut-off is found from the input alone: the highest bin whose power, averaged over the
window's frames, lies within CUTOFF_DB of the window's strongest bin; a window counts as band-limited
when that bin lies below BAND_LIMITED of the Nyquist frequency (recorded speech, even from band-limited
archives such as LibriSpeech's MP3 sources, reaches above 7.2 kHz at 16 kHz), and its kept band ends
EDGE bins below the cut-off, clear of the filter's slope.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_TINY = 1e-20
SMOOTH = 3  # bins (frames and frequencies) the powers are averaged over
CUTOFF_DB = 60.0  # a bin below the strongest by more than this carries nothing of the input
BAND_LIMITED = 0.875  # cut-offs below this share of the Nyquist frequency mark a band-limited input
EDGE = 5  # bins between the kept band and the cut-off


def _power(z: torch.Tensor) -> torch.Tensor:
    """|z|^2 without the square root."""
    return z.real.square() + z.imag.square()


def _local(p: torch.Tensor) -> torch.Tensor:
    """p (B, T, F) averaged over SMOOTH x SMOOTH neighbouring bins."""
    return F.avg_pool2d(p[:, None], SMOOTH, 1, SMOOTH // 2, count_include_pad=False)[:, 0]


def band_below_cutoff(y2: torch.Tensor) -> torch.Tensor:
    """y2: the input's power (B, T, F) -> (B, F) True for the bins below a band-limited window's cut-off
    (all False for a window that is not band-limited)."""
    p = y2.mean(1)
    live = p > p.amax(-1, keepdim=True) * 10.0 ** (-CUTOFF_DB / 10.0)
    bins = torch.arange(p.shape[-1], device=p.device)
    top = torch.where(live, bins, -1).amax(-1, keepdim=True)  # the cut-off bin; -1 for a silent window
    limited = (top >= 0) & (top < BAND_LIMITED * (p.shape[-1] - 1))
    return limited & (bins < top - EDGE)


def keep_input(codec, obs: torch.Tensor, est: torch.Tensor, keep_db: float,
               band_db: float | None = None) -> torch.Tensor:
    """obs, est: latents (B, T, D) of the input and the restoration -> latents of the blend."""
    y, s = codec.spectrum(obs), codec.spectrum(est)
    s2, dims = _power(s), tuple(range(1, y.ndim))
    g = ((y * s.conj()).real.sum(dims) / s2.sum(dims).clamp_min(_TINY)).clamp(0.1, 10.0)
    g = g.reshape(-1, *([1] * (y.ndim - 1)))
    s = s * g
    r = y - s
    num = _local(s2 * g.square())
    off = _local(_power(r))
    level = 10.0 ** (keep_db / 10.0)
    if band_db is not None:
        y2 = _power(y)
        band = band_below_cutoff(y2)[:, None]  # (B, 1, F)
        apart = (_local(y2).sqrt() - num.sqrt()).square()  # the difference in level alone
        off = torch.where(band, apart, off)
        level = torch.where(band, 10.0 ** (band_db / 10.0), level)
    b = num / (num + level * off).clamp_min(_TINY)
    return codec.latents((s + b * r) / g).to(est.dtype)
