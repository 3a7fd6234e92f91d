"""Fixed-shape windows over a stream, and the crossfade that stitches their outputs back together.

Every window has the same length (the compiled shape every engine sees); the tail window is zero-padded,
never reshaped. Memory is bounded by one window plus one overlap, whatever the file length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np


@dataclass(frozen=True)
class Geometry:
    length: int    # samples per window (model rate)
    overlap: int   # samples shared by neighbouring windows

    @classmethod
    def from_seconds(cls, seconds: float, overlap: float, sample_rate: int, multiple: int) -> "Geometry":
        length = int(round(seconds * sample_rate / multiple)) * multiple
        ov = int(round(overlap * sample_rate))
        if not 0 <= ov < length // 2:
            raise ValueError(f"overlap {overlap} s must be under half the window ({seconds} s)")
        return cls(length, ov)

    @property
    def hop(self) -> int:
        return self.length - self.overlap

    def count(self, total: int) -> int:
        """Windows needed to cover `total` samples."""
        return max(1, math.ceil(max(total - self.overlap, 1) / self.hop))


def windows(stream: Iterable[np.ndarray], geometry: Geometry, channels: int) -> Iterator[tuple[np.ndarray, int]]:
    """Cut a stream of (frames, channels) blocks into windows (length, channels), each with the number of
    real (unpadded) samples it holds. Window k starts at k * hop."""
    buf = np.zeros((0, channels), np.float32)
    emitted = False
    for block in stream:
        buf = np.concatenate([buf, block]) if len(buf) else block
        while len(buf) >= geometry.length:
            yield buf[: geometry.length].copy(), geometry.length
            emitted = True
            buf = buf[geometry.hop :]
    # The remainder is a window only if it holds samples no earlier window covered.
    if len(buf) > (geometry.overlap if emitted else 0):
        pad = np.zeros((geometry.length - len(buf), channels), np.float32)
        yield np.concatenate([buf, pad]), len(buf)


class Stitcher:
    """Overlap-add of window outputs with a raised-cosine crossfade over the overlap. `push` returns the
    samples that are final; `finish` returns the rest. Output length equals input length."""

    def __init__(self, geometry: Geometry):
        self.g = geometry
        ov = geometry.overlap
        ramp = 0.5 - 0.5 * np.cos(np.pi * (np.arange(ov) + 0.5) / max(ov, 1))
        self.fade_in, self.fade_out = ramp.astype(np.float32)[:, None], ramp[::-1].astype(np.float32)[:, None]
        self.tail: np.ndarray | None = None  # the previous window's last `overlap` samples, unfaded
        self.written = 0

    def push(self, out: np.ndarray, real: int) -> np.ndarray:
        """out (length, channels) for the next window, of which the first `real` samples are input
        (the rest is padding) -> final samples (frames, channels)."""
        ov = self.g.overlap
        out = out.astype(np.float32, copy=True)
        if self.tail is not None and len(self.tail) and ov:
            out[:ov] = self.tail * self.fade_out + out[:ov] * self.fade_in
        self.tail = out[self.g.hop : real].copy()
        ready = out[: min(self.g.hop, real)]
        self.written += len(ready)
        return ready

    def finish(self) -> np.ndarray:
        """Whatever of the last window's tail lies inside the input."""
        rest = self.tail if self.tail is not None else np.zeros((0, 1), np.float32)
        self.tail = None
        self.written += len(rest)
        return rest
