"""Fixed-shape windows over a stream, the crossfade that stitches their outputs back together, and the
packing of short files into shared windows.

Every window has the same length (the compiled shape every engine sees); a file longer than a window is
cut into overlapping windows, its tail window zero-padded, never reshaped. Memory is bounded by one
window plus one overlap, whatever the file length. Files no longer than a window are packed end to end
into shared windows (`pack`), `gap` samples of silence apart: a window is a list of parts, each one
file's stretch of it (`Part`), and every part's output is cut back out of the restored window. The
model hears each part apart from the others (`frame_groups`), and each part's noise (`spans`) and
post-processing (`extents`) are its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Iterator

import numpy as np


@dataclass(frozen=True)
class Geometry:
    length: int     # samples per window (model rate)
    overlap: int    # samples shared by neighbouring windows of one file
    gap: int = 0    # samples of silence between files packed into one window
    align: int = 1  # packed files start on multiples of this (the codec's hop: each keeps its own frame grid)

    @classmethod
    def from_seconds(cls, seconds: float, overlap: float, sample_rate: int, multiple: int,
                     gap: float = 0.0) -> "Geometry":
        length = int(round(seconds * sample_rate / multiple)) * multiple
        ov = int(round(overlap * sample_rate))
        if not 0 <= ov < length // 2:
            raise ValueError(f"overlap {overlap} s must be under half the window ({seconds} s)")
        if not 0 <= gap < seconds:
            raise ValueError(f"gap {gap} s must be 0 or more and under the window ({seconds} s)")
        return cls(length, ov, int(round(gap * sample_rate)), multiple)

    @classmethod
    def of(cls, config, sample_rate: int, hop: int) -> "Geometry":
        """From a WindowConfig, at the model's rate and on its codec's hop."""
        return cls.from_seconds(config.seconds, config.overlap, sample_rate, hop, config.gap)

    @property
    def hop(self) -> int:
        return self.length - self.overlap

    def count(self, total: int) -> int:
        """Windows needed to cover `total` samples."""
        return max(1, math.ceil(max(total - self.overlap, 1) / self.hop))


@dataclass(frozen=True)
class Part:
    """One file's stretch of a window: `length` samples of the file's window `index`, at `offset` in the
    window. A file longer than a window has a part at 0 in each of its windows; files packed into one
    window have a part each."""
    job: Any
    index: int
    offset: int
    length: int

    def cut(self, out: np.ndarray) -> np.ndarray:
        """A restored window (rows, L) -> this part's samples (rows, length)."""
        return out[:, self.offset : self.offset + self.length]


def spans(parts: list[Part], frames: int, hop: int) -> list[tuple[int, int]]:
    """The window's `frames` latent frames, split between its parts: each part's run from its first frame
    (the first part's from 0) to the next part's first, the last part's to the end. A part takes the gap
    (or padding) after it as a file alone takes the padding after it: its noise covers them, drawn from
    its own generator, the one it draws from alone (restore/pipeline/noise.py)."""
    starts = [0] + [p.offset // hop for p in parts[1:]]
    return list(zip(starts, starts[1:] + [frames]))


def frame_groups(parts: list[Part], frames: int, hop: int, reach: int = 0) -> np.ndarray:
    """(frames,) int: which part each latent frame of a window belongs to (1, 2, ... in order), 0 for the
    silence between and after them. A part's frames are those its samples fall in, widened by `reach`
    frames either side (the frames whose conditions its samples reach: model.encoder.reach, and the
    codec's frames, which straddle two hops), up to halfway to the next part. A window of one file is
    all its group. The model keeps the parts
    apart by it (model.layers.group_mask, model.encoder.SemanticEncoder): each part is restored from
    itself and the silence, which no part reaches."""
    if len(parts) == 1:  # a window of one file is all its own, padding included: as it always was
        return np.ones(frames, np.int64)
    own = [(p.offset // hop, -(-(p.offset + p.length) // hop)) for p in parts]
    groups = np.zeros(frames, np.int64)
    for i, (a, b) in enumerate(own):
        lo = max(a - reach, 0 if i == 0 else (own[i - 1][1] + a) // 2)
        hi = min(b + reach, frames if i == len(own) - 1 else (b + own[i + 1][0]) // 2)
        groups[lo:hi] = i + 1
    return groups


def extents(groups: np.ndarray) -> list[tuple[int, int]]:
    """Each part's run of frames (start, stop) in `frame_groups`' groups, in order."""
    found = [np.flatnonzero(groups == g) for g in range(1, int(groups.max(initial=0)) + 1)]
    return [(int(f[0]), int(f[-1]) + 1) for f in found if len(f)]


def grid_offsets(shifts: int, hop: int) -> list[int]:
    """The offsets (samples) at which a window is restored when it is restored `shifts` times: evenly
    spaced within one hop of the codec's frame grid, 0 first."""
    return [k * hop // shifts for k in range(shifts)]


def spin(wave, offsets: list[int]):
    """(rows, N) window audio (a torch tensor) -> (len(offsets) * rows, N): a copy delayed by each offset,
    zeros before it, cut to the window."""
    import torch

    n = wave.shape[1]
    return torch.cat([wave if s == 0 else torch.nn.functional.pad(wave[:, : n - s], (s, 0)) for s in offsets])


def unspin(audio: np.ndarray, offsets: list[int]) -> np.ndarray:
    """The inverse of `spin` on restored audio, averaged: (len(offsets) * rows, N) -> (rows, N), each copy
    moved back by its offset; a sample covered by fewer copies (the last of the window) is the mean of
    those that cover it."""
    k = len(offsets)
    if k == 1:
        return audio
    rows, n = audio.shape[0] // k, audio.shape[1]
    total = np.zeros((rows, n), audio.dtype)
    count = np.zeros(n, audio.dtype)
    for i, s in enumerate(offsets):
        total[:, : n - s] += audio[i * rows : (i + 1) * rows, s:]
        count[: n - s] += 1
    return total / count


OPEN_WINDOWS = 4  # windows of one key kept open for later files to fill (first fit)


def pack(items: Iterable[tuple[Any, int | None, Hashable, int]], geometry: Geometry, max_tokens: int = 0
         ) -> Iterator[list[tuple[Any, int]]]:
    """Group files into windows: items (file, samples at the model rate or None, key, transcript
    characters) in order -> groups [(file, offset)]. A file longer than a window, or of unknown length
    (None: it will fail when opened), is a group by itself at 0 with windows of its own. Shorter files
    share windows with other files of the same key (restored rows, whether there is a transcript): each
    goes into the first of the key's last OPEN_WINDOWS windows where it fits, `gap` samples after the file
    before it, rounded up to `align`, with the transcripts joined within `max_tokens` (0: no limit); else
    it opens a window, and the oldest of more than OPEN_WINDOWS is closed. Filling earlier windows with
    later files leaves less of each window empty than closing it at the first file that does not fit (a
    folder of 2-10 s clips: 24 windows where 26, 23 the least possible). Deterministic: the same items
    give the same groups, wherever they are planned."""
    open_: dict[Hashable, list[list]] = {}  # key -> open windows, oldest first: [slots, end, characters]
    for item, samples, key, chars in items:
        if samples is None or samples > geometry.length:
            yield [(item, 0)]
            continue
        windows = open_.setdefault(key, [])
        for w in windows:
            slots, end, text = w
            offset = -(-(end + geometry.gap) // geometry.align) * geometry.align
            joined = text + chars + (1 if chars and text else 0)  # joined with a space
            if offset + samples <= geometry.length and (not max_tokens or 1 + joined <= max_tokens):
                slots.append((item, offset))
                w[1:] = [offset + samples, joined]
                break
        else:
            windows.append([[(item, 0)], samples, chars])
            if len(windows) > OPEN_WINDOWS:
                yield windows.pop(0)[0]
    for windows in open_.values():
        for slots, _, _ in windows:
            yield slots


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

    def push(self, out: np.ndarray) -> np.ndarray:
        """out (frames, channels): the next window's output where it holds input (its padding cut off)
        -> final samples (frames, channels)."""
        ov = self.g.overlap
        out = out.astype(np.float32, copy=True)
        if self.tail is not None and len(self.tail) and ov:
            out[:ov] = self.tail * self.fade_out + out[:ov] * self.fade_in
        self.tail = out[self.g.hop :].copy()
        ready = out[: self.g.hop]
        self.written += len(ready)
        return ready

    def finish(self) -> np.ndarray:
        """Whatever of the last window's tail lies inside the input."""
        rest = self.tail if self.tail is not None else np.zeros((0, 1), np.float32)
        self.tail = None
        self.written += len(rest)
        return rest
