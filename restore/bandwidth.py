"""The band an input carries: the frequency above which it holds nothing but a floor far below its band
(a phone line, a low-pass filter, a low-rate codec), so that a restoration can add nothing above it.

`LongTermSpectrum` takes the input's mono mix at its own rate, in blocks of any size (audio.scan feeds
it in its one streaming pass), and keeps the power spectra of its frames summed per level, so that at
the end the spectrum of the active frames (within ACTIVE_DB of the LEVEL_SHARE-quantile frame: speech,
and noise under it, not the silence) is known without holding the frames. Its `cutoff` is the lowest
frequency f from MIN_HZ such that the spectrum (smoothed over SMOOTH_HZ) everywhere above f lies at least
EDGE_DB below its mean over the SPAN_HZ just below f: an edge followed by nothing but a floor. A
spectrum that falls as speech does, noise below the cut-off, a dip between formants, a quiet file: none
of them makes such an edge; a full-band input has none, nor has silence.

`limit` turns it into what the pipeline uses: the frequency above which the restoration adds nothing
(restore/pipeline/post.py, `limit_band`), or None for a full-band input, whose cut-off reaches the
model's band edge (within EDGE_MARGIN_HZ: the resampler's own transition to the model's rate).
"""

from __future__ import annotations

import math

import numpy as np

FRAME_SECONDS = 0.032   # analysis frame, rounded to a power of two in samples (512 at 16 kHz, 2048 at 48 kHz)
LEVEL_DB = 1.0          # frames are summed per level step of this many dB
LEVEL_SHARE = 0.95      # the quantile of the frame levels the active frames are measured from
ACTIVE_DB = 30.0        # frames within this of it are active
SILENT_DB = -100.0      # ... unless it lies below this (mean square, dBFS): silence has no band
SMOOTH_HZ = 150.0       # the long-term spectrum is averaged over this much frequency
SPAN_HZ = 500.0         # the band just below a candidate edge that it is measured against
EDGE_DB = 30.0          # how far below that everything above an edge lies
MIN_HZ = 1000.0         # edges are looked for from here up (below it lies no speech band's cut-off)
EDGE_MARGIN_HZ = 500.0  # a cut-off this close to the model's band edge counts as reaching it
_TINY = 1e-30


def frame_size(rate: int) -> int:
    return 2 ** round(math.log2(FRAME_SECONDS * rate))


class LongTermSpectrum:
    """The long-term power spectrum of a stream's active frames, in one pass and bounded memory: frames
    of `frame_size(rate)` samples, half overlapping, Hann-windowed, summed per LEVEL_DB step of their
    level."""

    def __init__(self, rate: int):
        self.rate, self.n = rate, frame_size(rate)
        self.hop = self.n // 2
        self.window = np.hanning(self.n + 1)[:-1]  # periodic
        self.tail = np.zeros(0, np.float64)
        self.sums: dict[int, np.ndarray] = {}  # level step -> summed power spectrum of its frames
        self.counts: dict[int, int] = {}

    def push(self, x: np.ndarray) -> None:
        """x (N,): the next samples of the mono mix."""
        data = np.concatenate([self.tail, np.asarray(x, np.float64)])
        frames = (len(data) - self.n) // self.hop + 1 if len(data) >= self.n else 0
        if frames:
            w = np.lib.stride_tricks.sliding_window_view(data, self.n)[:: self.hop][:frames] * self.window
            level = 10 * np.log10(np.mean(w * w, axis=1) / np.mean(self.window**2) + _TINY)
            power = np.abs(np.fft.rfft(w, axis=1)) ** 2
            steps = np.floor(level / LEVEL_DB).astype(np.int64)
            for s in np.unique(steps):
                sel = steps == s
                self.sums[int(s)] = self.sums.get(int(s), 0.0) + power[sel].sum(0)
                self.counts[int(s)] = self.counts.get(int(s), 0) + int(sel.sum())
        self.tail = data[frames * self.hop :]

    def spectrum(self) -> np.ndarray | None:
        """Mean power per bin (n // 2 + 1) over the active frames; None where there are none."""
        if not self.counts:
            return None
        steps = np.array(sorted(self.counts))
        counts = np.array([self.counts[s] for s in steps])
        ref = steps[np.searchsorted(np.cumsum(counts), LEVEL_SHARE * counts.sum())] * LEVEL_DB
        if ref < SILENT_DB:
            return None
        active = [s for s in steps if s * LEVEL_DB >= ref - ACTIVE_DB]
        return sum(self.sums[s] for s in active) / sum(self.counts[s] for s in active)

    def cutoff(self) -> float | None:
        """The input's cut-off in Hz (module docstring), or None: it has none (full band, or silence)."""
        p = self.spectrum()
        if p is None:
            return None
        freqs = np.fft.rfftfreq(self.n, 1.0 / self.rate)
        return edge(p, freqs)


def edge(power: np.ndarray, freqs: np.ndarray) -> float | None:
    """The lowest frequency from MIN_HZ above which a long-term power spectrum lies EDGE_DB below its mean
    over the SPAN_HZ below it (both in dB, after SMOOTH_HZ of averaging), less half of SMOOTH_HZ (the
    averaging spreads an edge up by that much); None where there is none."""
    step = freqs[1] - freqs[0]
    k = max(1, round(SMOOTH_HZ / step)) | 1
    smooth = np.convolve(np.pad(power, k // 2, mode="edge"), np.ones(k) / k, mode="valid")
    db = 10 * np.log10(smooth + _TINY)
    above = np.maximum.accumulate(db[::-1])[::-1]  # the loudest bin from each bin up
    span = max(1, round(SPAN_HZ / step))
    total = np.concatenate([[0.0], np.cumsum(db)])
    idx = np.arange(span, len(db))  # bins with a whole span below them
    below = (total[idx] - total[idx - span]) / span
    found = idx[(freqs[idx] >= MIN_HZ) & (above[idx] <= below - EDGE_DB)]
    return float(freqs[found[0]] - SMOOTH_HZ / 2) if len(found) else None


def limit(cutoff_hz: float | None, model_rate: int) -> float | None:
    """The frequency above which a restoration at `model_rate` may add nothing to an input: its cut-off
    (audio.Levels.cutoff_hz: the edge found, else half the input's rate), or None where that reaches the
    model's band edge, less EDGE_MARGIN_HZ (a full-band input: the model's whole band is its own)."""
    if cutoff_hz is None or cutoff_hz >= model_rate / 2 - EDGE_MARGIN_HZ:
        return None
    return float(cutoff_hz)
