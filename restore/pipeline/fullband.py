"""Full-band outputs: the input's band above the model's, cleaned with the restoration as the guide.

The model restores at 16 kHz, so on its own a 44.1 or 48 kHz input would come back with nothing above
8 kHz (and its top bins droop from ~6.7 kHz). At the output rate, in one STFT (~21 ms frames, hop a
quarter frame), the output is

    Y = w_lo S + w_hi G X,    w_lo + w_hi = 1,

with S the restoration (resampled to the output rate: time-aligned with the input, zero phase) and X
the input. The weights are a raised-cosine crossover from CROSSOVER_HZ[0] to CROSSOVER_HZ[1], where the
restoration is still at full level, so that where S and G X agree (a clean input) Y is X, and no seam
is left: no level step, no notch, no phase cancellation. The gain G (per frame, per bin, at most 1,
so nothing is added where the input has nothing) is the product of

- the guide: r = sqrt(|S|^2 / |X|^2), the powers summed over GUIDE_HZ (just below the crossover) and
  over GUIDE_FRAMES frames, at most 1. Whatever the restoration took out there (noise in the pauses,
  reverberation tails, noise in speech) is taken out of the upper band in the same proportion, and
  the upper band follows the restoration's level (which can come out quieter than the input), so it
  joins the low band without a step. In frames whose guide band is empty beside their upper band
  (UNINFORMED: a sweep above the guide band, hiss alone) the ratio over LEVEL_SECONDS stands in;
- a noise floor: the minimum over FLOOR_SECONDS of the input's power averaged over FLOOR_SMOOTH
  (times FLOOR_BIAS, the minimum's bias on stationary noise) as the stationary noise N, and with P the
  input's power averaged over SUB_SMOOTH the power subtraction gain sqrt(max(1 - OVER N / P,
  FLOOR_GAIN^2)), raised to the sampler's strength. It removes hiss the guide band does not see (a
  noise's spectrum can rise where speech falls). Where the guide has already taken a noise out the
  two count it twice, which costs the speech little: the guide is near 1 where speech dominates its
  band, the floor's gain near 1 where speech dominates a bin.

The strength scales only the noise floor's gain (0: none of it); the guide follows the strength and the
keep-input of the restoration by itself (at strength 0 the restoration is the model's linear estimate,
a fixed equalisation of the input, so the band above the crossover is the input, or the input at the
restoration's level where that is lower).

Every output sample depends on the inputs within `reach(rate)` samples of it, so `BandJoiner` can run
`combine` over overlapping chunks of a stream and give exactly the whole-file result.
"""

from __future__ import annotations

import math

import numpy as np

from .. import audio

CROSSOVER_HZ = (5500.0, 6500.0)  # restoration below, cleaned input above; the shipped model is full-level to ~6.7 kHz
GUIDE_HZ = (4500.0, 6500.0)      # where the restoration's gain is read
GUIDE_FRAMES = 5                 # frames the guide's powers are summed over (~27 ms at 48 kHz)
FLOOR_SECONDS = 1.5              # minimum-statistics window of the noise floor
FLOOR_SMOOTH = (9, 15)           # frames x bins the input's power is averaged over before the minimum
FLOOR_BIAS = 1.56                # that minimum -> the mean noise power (median ratio on white noise)
OVER = 2.5                       # over-subtraction of the noise floor
SUB_SMOOTH = (5, 9)              # frames x bins the input's power is averaged over for the subtraction
FLOOR_GAIN = 10 ** (-25 / 20)    # the noise floor's gain never goes below this
UNINFORMED = 10 ** (-30 / 10)    # guide band this far below the upper band (power per bin): it knows nothing
LEVEL_SECONDS = 2.0              # ... and the restoration's level over this long stands in for it
FRAME_SECONDS = 0.021            # STFT frame, rounded to a power of two in samples
CHUNK_SECONDS = 10.0             # a stream is joined in chunks of this much output (plus context)
_TINY = 1e-20


def frame_size(rate: int) -> tuple[int, int]:
    """(n_fft, hop) at `rate`: 1024 and 256 at 44.1 and 48 kHz."""
    n = 2 ** int(round(math.log2(FRAME_SECONDS * rate)))
    return n, n // 4


def applies(input_rate: int, output_rate: int, model_rate: int) -> bool:
    """Whether an input has a band above the model's that the output can carry."""
    return min(input_rate, output_rate) > model_rate


def reach(rate: int) -> int:
    """Samples either side of an output sample that it depends on (a multiple of the hop)."""
    n, hop = frame_size(rate)
    level = int(round(LEVEL_SECONDS * rate / hop / 2))
    frames = max(_floor_frames(rate, hop) // 2 + FLOOR_SMOOTH[0] // 2, level) + SUB_SMOOTH[0] + GUIDE_FRAMES + n // hop
    return frames * hop


def _floor_frames(rate: int, hop: int) -> int:
    return 2 * int(round(FLOOR_SECONDS * rate / hop / 2)) + 1


def crossover(freqs: np.ndarray) -> np.ndarray:
    """w_hi per frequency: 0 below CROSSOVER_HZ[0], 1 above CROSSOVER_HZ[1], raised cosine between."""
    lo, hi = CROSSOVER_HZ
    u = np.clip((freqs - lo) / (hi - lo), 0.0, 1.0)
    return np.sin(0.5 * np.pi * u) ** 2


def _window(n: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)  # periodic Hann


def stft(x: np.ndarray, n: int, hop: int) -> np.ndarray:
    """x (N,) -> (T, n // 2 + 1) complex64, frame k centred on sample k * hop (zero-padded at both ends)."""
    frames = len(x) // hop + 1
    pad = np.zeros(frames * hop + n, np.float32)
    pad[n // 2 : n // 2 + len(x)] = x
    return np.fft.rfft(np.lib.stride_tricks.sliding_window_view(pad, n)[::hop][:frames] * _window(n), axis=-1)


def istft(spec: np.ndarray, n: int, hop: int, length: int) -> np.ndarray:
    """Inverse of `stft` (weighted overlap-add) -> (length,) float32."""
    frames = spec.shape[0]
    w = _window(n)
    parts = np.fft.irfft(spec, n=n, axis=-1).astype(np.float32) * w
    out = np.zeros(frames * hop + n, np.float32)
    norm = np.zeros(frames * hop + n, np.float32)
    step = n // hop
    for k in range(step):  # frames k, k + n/hop, ... do not overlap each other: add them at once
        m = len(range(k, frames, step))
        out[k * hop : k * hop + m * n] += parts[k::step].reshape(-1)
        norm[k * hop : k * hop + m * n] += np.tile(w * w, m)
    return out[n // 2 : n // 2 + length] / np.maximum(norm[n // 2 : n // 2 + length], 1e-6)


def _box(p: np.ndarray, size: int, axis: int) -> np.ndarray:
    """Centred moving average of odd `size` along `axis`, edges repeated. (Sums of windows, not
    differences of a running sum, which lose quiet frames after loud ones to rounding.)"""
    h = size // 2
    pad = [(0, 0)] * p.ndim
    pad[axis] = (h, h)
    return np.lib.stride_tricks.sliding_window_view(np.pad(p, pad, mode="edge"), size, axis=axis).mean(axis=-1)


def _running_min(p: np.ndarray, size: int) -> np.ndarray:
    """Centred running minimum over odd `size` along axis 0 of (T, F), edges repeated (van Herk /
    Gil-Werman: two accumulated minima per block of `size`, linear in T)."""
    t, f = p.shape
    h = size // 2
    q = np.pad(p, ((h, h), (0, 0)), mode="edge")
    blocks = -(-q.shape[0] // size)
    q = np.pad(q, ((0, blocks * size - q.shape[0]), (0, 0)), constant_values=np.inf).reshape(blocks, size, f)
    ahead = np.minimum.accumulate(q, axis=1).reshape(-1, f)                            # from each block's start
    behind = np.minimum.accumulate(q[:, ::-1], axis=1)[:, ::-1].reshape(-1, f)  # to each block's end
    return np.minimum(behind[:t], ahead[size - 1 : size - 1 + t])


def noise_floor(power: np.ndarray, rate: int, hop: int) -> np.ndarray:
    """Stationary noise power per bin (T, F) from the input's power (T, F): minimum statistics."""
    smooth = _box(_box(power, FLOOR_SMOOTH[0], axis=0), FLOOR_SMOOTH[1], axis=1)
    return FLOOR_BIAS * _running_min(smooth, _floor_frames(rate, hop))


def gains(spec_in: np.ndarray, spec_rest: np.ndarray, rate: int, strength: float = 1.0) -> np.ndarray:
    """Gain (T, F') on the input's STFT (T, F) in the F' bins above CROSSOVER_HZ[0], from it and the
    restoration's STFT (T, F); in [0, 1]."""
    n = 2 * (spec_in.shape[-1] - 1)
    hop = frame_size(rate)[1]
    freqs = np.fft.rfftfreq(n, 1.0 / rate)
    guide = (freqs >= GUIDE_HZ[0]) & (freqs < GUIDE_HZ[1])
    px_guide, ps_guide = _power(spec_in[:, guide]).sum(-1), _power(spec_rest[:, guide]).sum(-1)
    gx, gs = _box(px_guide, GUIDE_FRAMES, axis=0), _box(ps_guide, GUIDE_FRAMES, axis=0)
    px = _power(spec_in[:, freqs > CROSSOVER_HZ[0]])
    # Where the guide band holds next to nothing beside the upper band (a sweep above it, hiss alone) the
    # guide knows nothing: there it falls back on the restoration's level over LEVEL_SECONDS.
    span = 2 * int(round(LEVEL_SECONDS * rate / hop / 2)) + 1
    level2 = (_box(ps_guide, span, axis=0) + _TINY) / (_box(px_guide, span, axis=0) + _TINY)
    eps = UNINFORMED * guide.sum() * _box(px.mean(-1), GUIDE_FRAMES, axis=0) + _TINY
    r = np.minimum(np.sqrt((gs + np.minimum(level2, 1.0) * eps) / (gx + eps)), 1.0)
    smooth = _box(_box(px, SUB_SMOOTH[0], axis=0), SUB_SMOOTH[1], axis=1)
    sub = np.sqrt(np.clip(1.0 - OVER * noise_floor(px, rate, hop) / np.maximum(smooth, _TINY), FLOOR_GAIN**2, 1.0))
    return (r[:, None] * sub ** max(strength, 0.0)).astype(np.float32)


def _power(z: np.ndarray) -> np.ndarray:
    return z.real.astype(np.float64) ** 2 + z.imag.astype(np.float64) ** 2


def combine(x: np.ndarray, restored: np.ndarray, rate: int, strength: float = 1.0) -> np.ndarray:
    """The input x (N, C) and its restoration (N, C), both at `rate` and time-aligned -> the output (N, C)
    float32: the restoration below the crossover, the cleaned input above it."""
    if x.shape != restored.shape:
        raise ValueError(f"input {x.shape} and restoration {restored.shape} differ in shape")
    n, hop = frame_size(rate)
    hi = crossover(np.fft.rfftfreq(n, 1.0 / rate)).astype(np.float32)
    up = hi > 0
    out = np.empty(x.shape, np.float32)
    for c in range(x.shape[1]):  # one channel at a time keeps the spectra small
        X, S = stft(x[:, c], n, hop), stft(restored[:, c], n, hop)
        Y = (1.0 - hi) * S
        Y[:, up] += hi[up] * gains(X, S, rate, strength) * X[:, up]
        out[:, c] = istft(Y, n, hop, len(x))
    return out


class BandJoiner:
    """`combine` over a stream: push time-aligned blocks of the input and the restoration (any sizes,
    equal in total), get back the output as far as it is final (it lags by about `reach`); `last=True`
    flushes. The result equals `combine` over the whole file: chunks start on the frame grid and carry
    `reach` samples of context either side. Memory is bounded by a chunk and its context."""

    def __init__(self, rate: int, channels: int, strength: float = 1.0):
        self.rate, self.strength = rate, strength
        self.hop = frame_size(rate)[1]
        self.context = reach(rate)
        self.chunk = int(CHUNK_SECONDS * rate) // self.hop * self.hop
        self.x = np.zeros((0, channels), np.float32)
        self.s = np.zeros((0, channels), np.float32)
        self.base = 0   # file position of self.x[0] (a multiple of the hop)
        self.done = 0   # samples given out (a multiple of the hop until the last push)

    def push(self, x: np.ndarray, restored: np.ndarray, last: bool = False) -> np.ndarray:
        self.x = np.concatenate([self.x, x.astype(np.float32)])
        self.s = np.concatenate([self.s, restored.astype(np.float32)])
        have = self.base + min(len(self.x), len(self.s))
        limit = have if last else (have - self.context) // self.hop * self.hop
        out = []
        while self.done < limit:
            end = min(limit, self.done + self.chunk)
            start, stop = max(0, self.done - self.context), min(have, end + self.context)  # start: on the grid
            a, b = start - self.base, stop - self.base
            out.append(combine(self.x[a:b], self.s[a:b], self.rate, self.strength)[self.done - start : end - start])
            self.done = end
        drop = max(0, self.done - self.context) - self.base
        if drop > 0:
            self.x, self.s, self.base = self.x[drop:], self.s[drop:], self.base + drop
        return np.concatenate(out) if out else np.zeros((0, self.x.shape[1]), np.float32)


class FileBand:
    """One file's side of the join: reads the input again, at the output rate and with its channels
    mixed as the restoration's rows are, and joins each block of restoration to the same stretch of it.
    Called with the restoration's blocks (frames, rows) in order; returns output blocks (they lag)."""

    def __init__(self, info: audio.AudioInfo, rate: int, mix: bool, strength: float = 1.0):
        self.stream = audio.model_rate_stream(info, rate)
        self.mix = mix
        rows = 1 if mix else info.channels
        self.pending = np.zeros((0, rows), np.float32)
        self.joiner = BandJoiner(rate, rows, strength)

    def __call__(self, restored: np.ndarray, last: bool = False) -> np.ndarray:
        n = len(restored)
        while len(self.pending) < n:
            block = next(self.stream, None)
            if block is None:
                break
            block = block.mean(axis=1, keepdims=True) if self.mix else block
            self.pending = np.concatenate([self.pending, block])
        x, self.pending = self.pending[:n], self.pending[n:]
        if len(x) < n:  # resampling can leave the input a sample short of the restoration
            x = np.concatenate([x, np.zeros((n - len(x), x.shape[1]), np.float32)])
        if last:
            self.stream.close()
        return self.joiner.push(x, restored, last)
