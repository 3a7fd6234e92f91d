"""One file's way through the pipeline: validated on opening, cut into level-normalised windows,
and put back together (crossfade, resampling to the output rate, the output level, atomic write) as
restored windows arrive. A restorer drives many of these at once when it batches windows of several files."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from .. import audio, text as text_mod
from ..errors import InputError, RestoreError, UsageError
from ..options import RestoreOptions
from .fullband import FileBand, applies as fullband_applies
from .post import LevelledOutput
from .windows import Geometry, Stitcher, windows

LEVEL_RMS = 0.05  # the input level the model was trained at (restore.training.batches.LEVEL_RMS)


@dataclass
class FileReport:
    input: str
    output: str
    seconds_audio: float
    seconds_wall: float
    windows: int
    sample_rate_in: int
    sample_rate_out: int
    channels_in: int
    channels_restored: int
    sampler: dict            # the sampler's and the post-processing's settings, as resolved
    seed: int
    transcript: str          # "given", "sidecar" or "none"
    clipped_samples: int = 0
    level: str = "input"                 # "input": levelled to the input's RMS; "model": as restored
    level_gain_db: float | None = None   # the gain that levelling applied
    level_limited: bool = False          # the gain was lowered to keep the peaks below full scale
    warnings: list[str] = field(default_factory=list)

    @property
    def realtime(self) -> float:
        return self.seconds_audio / max(self.seconds_wall, 1e-9)

    def to_dict(self) -> dict:
        return {**asdict(self), "realtime_factor": round(self.realtime, 3)}


@dataclass
class Window:
    job: "FileJob"
    index: int
    wave: torch.Tensor       # (rows, N) level-normalised, zero-padded to the window length
    real: int                # samples of input in it (the rest is padding)
    texts: list[str | None]  # one transcript share per row


def find_transcript(path: Path, transcript: str | None) -> tuple[str | None, str]:
    """--transcript (text, or a path to a .txt file) wins; else a sidecar NAME.txt; else none."""
    if transcript:
        p = Path(transcript)
        if p.suffix.lower() == ".txt" and p.is_file():
            return p.read_text(errors="replace").strip() or None, "given"
        if p.suffix.lower() == ".txt" and not any(c.isspace() for c in transcript):
            # a mistyped transcript file name would otherwise be used as the transcript text
            raise UsageError(f"{transcript}: no such transcript file")
        return transcript.strip() or None, "given"
    sidecar = path.with_suffix(".txt")
    if sidecar.is_file():
        return sidecar.read_text(errors="replace").strip() or None, "sidecar"
    return None, "none"


class FileJob:
    """Opening validates everything before any model work; the output file appears on `finish`."""

    def __init__(self, input: str | Path, output: str | Path, options: RestoreOptions, *, model_rate: int,
                 geometry: Geometry, settings: dict, overwrite: bool = False, tracer=None, max_tokens: int = 0,
                 levels: audio.Levels | None = None, open_output: bool = True):
        """`settings`: the resolved sampler and post-processing settings, for the report; `max_tokens`: the
        longest transcript the model reads, null token included. Where a file is read on one machine and
        written on another (restore/pipeline/cluster.py), the reading side opens no output
        (`open_output=False`: no disk-space check, no writer) and the writing side is given the `levels`
        it measured."""
        self.started = time.perf_counter()
        self.input, self.output = audio.as_path(input, "input"), audio.as_path(output, "output")
        self.geometry, self.model_rate, self.seed, self.tracer = geometry, model_rate, options.seed, tracer
        self.info = info = audio.probe(self.input)
        audio.check_output(self.input, self.output, overwrite)
        self.levels = levels = levels if levels is not None else audio.scan(info)
        self.text, text_source = find_transcript(self.input, options.transcript)
        self.max_tokens, self.cut_windows = max_tokens, []
        self.mix = options.channels == "mix" or (options.channels == "auto" and levels.channels_identical)
        self.rows = 1 if self.mix else info.channels
        self.out_channels = 1 if options.channels == "mix" else info.channels
        self.out_rate = options.sample_rate or info.sample_rate
        # the model hears every window at the level it was trained at; its output is scaled back (deliver)
        self.gain = LEVEL_RMS / max(levels.rms, 1e-6)
        self.total = int(round(info.frames * model_rate / info.sample_rate))
        self.count = geometry.count(self.total)
        self.stitch = Stitcher(geometry)
        self.back = audio.StreamResampler(model_rate, self.out_rate, self.rows)
        # Above the model's band the output is the input's own band, cleaned with the restoration as guide.
        self.band = (FileBand(info, self.out_rate, self.mix, settings["strength"])
                     if fullband_applies(info.sample_rate, self.out_rate, model_rate) else None)
        # Resampling in and back out can be a sample off the exact length: the output is cut or
        # zero-padded to the input's duration at the output rate.
        self.expected = int(round(info.frames * self.out_rate / info.sample_rate))
        self.written = 0
        self.delivered = 0
        self.failed: Exception | None = None
        self.report = FileReport(str(self.input), str(self.output), info.duration, 0.0, self.count,
                                 info.sample_rate, self.out_rate, info.channels, self.rows, settings, self.seed,
                                 text_source, level=options.level)
        if info.truncation():
            self.report.warnings.append(info.truncation())
        if not open_output:
            self.out: LevelledOutput | None = None
            return
        # Disk space: the levelled output's float copy and the output coexist until the copy is dropped.
        # Both are known for uncompressed outputs; for compressed ones the uncompressed size is a bound.
        ext = self.output.suffix.lower()
        subtype = audio.output_subtype(info, ext)
        pcm = audio.pcm_bytes(self.expected, self.out_channels, subtype or audio.WRITE_FORMATS[ext][1])
        spool = audio.pcm_bytes(self.expected, self.out_channels, "FLOAT") if options.level == "input" else 0
        known = spool + (pcm if ext in audio.UNCOMPRESSED else 0)
        self.needed, self.needed_bound = spool + pcm + audio.SPACE_MARGIN, ext not in audio.UNCOMPRESSED
        full = audio.disk_full(self.output, known + audio.SPACE_MARGIN)  # before the file starts
        if full is not None:
            raise full
        writer = audio.AtomicWriter(self.output, self.out_rate, self.out_channels, subtype)
        self.out = LevelledOutput(writer, levels.rms if options.level == "input" else None)

    @contextmanager
    def _writing(self):
        """A failed write names the output and, where the disk is full, the space this file needs."""
        try:
            yield
        except RestoreError:
            raise
        except (OSError, RuntimeError) as e:  # soundfile's LibsndfileError is a RuntimeError
            held = self.out.held()
            raise (audio.disk_full(self.output, self.needed, e, held, bound=self.needed_bound)
                   or InputError(f"{self.output}: writing failed ({audio.short_reason(e)})")) from None

    def windows(self) -> Iterator[Window]:
        sr = self.model_rate
        stream = audio.model_rate_stream(self.info, sr)
        for k, (win, real) in enumerate(windows(stream, self.geometry, self.info.channels)):
            x = win.mean(axis=1, keepdims=True) if self.mix else win  # (L, rows)
            start = k * self.geometry.hop / sr
            share = text_mod.window_share(self.text, start, start + real / sr, self.total / sr)
            if self.max_tokens and text_mod.tokens(share) > self.max_tokens:
                self.cut_windows.append(k + 1)
            wave = torch.from_numpy(np.ascontiguousarray(x.T * self.gain, dtype=np.float32))
            yield Window(self, k, wave, real, [share] * self.rows)

    def deliver(self, out: np.ndarray, real: int) -> bool:
        """The next window's restored audio (rows, L) at the model rate; True when it was the last."""
        self._emit(self.stitch.push(out.T / self.gain, real))
        self.delivered += 1
        if self.delivered == self.count:
            self._emit(self.stitch.finish().reshape(-1, self.rows), last=True)
            return True
        return False

    def _emit(self, block: np.ndarray, last: bool = False) -> None:
        block = self.back(block, last=last)[: self.expected - self.written]
        if last and self.written + len(block) < self.expected:
            block = np.concatenate([block, np.zeros((self.expected - self.written - len(block), self.rows), np.float32)])
        self.written += len(block)  # restored samples so far (the full-band join holds some back a while)
        if self.band is not None:
            block = self.band(block, last=last)
        if len(block):
            with self.tracer.span("write", "io"), self._writing():
                self.out.write(np.repeat(block, self.out_channels, axis=1)
                               if self.rows == 1 and self.out_channels > 1 else block)

    def finish(self, warnings: list[str]) -> FileReport:
        with self._writing():
            self.out.commit()
        r = self.report
        if self.cut_windows:
            r.warnings.append(f"the transcript is longer than the model reads ({self.max_tokens - 1} characters, "
                              f"its tokens, a window): its end was left out in window(s) {', '.join(map(str, self.cut_windows))}")
        r.clipped_samples = self.out.writer.clipped
        r.level_gain_db = None if self.out.gain_db is None else round(self.out.gain_db, 2)
        r.level_limited = self.out.limited
        r.warnings += warnings
        if r.clipped_samples:
            r.warnings.append(f"{r.clipped_samples} output samples were clipped to full scale")
        r.seconds_wall = time.perf_counter() - self.started
        return r

    def abort(self) -> None:
        self.out.abort()
