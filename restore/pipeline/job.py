"""One file's way through the pipeline: validated on opening, cut into level-normalised windows,
and put back together (crossfade, resampling to the output rate, the output level, atomic write) as
restored windows arrive. A restorer drives many of these at once when it batches windows of several
files, and when short files share windows (`sizing` tells the packing what it needs to know of a file,
`group_windows` lays out the windows of a group of files it packed)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from .. import audio, bandwidth, text as text_mod
from ..errors import InputError, RestoreError, UsageError
from ..options import RestoreOptions
from .fullband import FileBand, applies as fullband_applies
from .post import LevelledOutput
from .windows import Geometry, Part, Stitcher, frame_groups, spans, windows

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
    cutoff_hz: float | None = None       # a band-limited input's cut-off (restore.bandwidth); None: full band
    warnings: list[str] = field(default_factory=list)

    @property
    def realtime(self) -> float:
        return self.seconds_audio / max(self.seconds_wall, 1e-9)

    def to_dict(self) -> dict:
        return {**asdict(self), "realtime_factor": round(self.realtime, 3)}


@dataclass
class Window:
    wave: torch.Tensor | None  # (rows, N) level-normalised, silent outside its parts; None: the one part's
                               # file failed to read (a marker for the deliverer)
    parts: list[Part]          # the files it holds, in order: one, or several short ones packed together
    texts: list[str | None]    # one transcript per row

    def groups(self, frames: int, hop: int, reach: int, offset: int = 0) -> np.ndarray:
        """Which part each latent frame belongs to, 0 for silence (windows.frame_groups), with the
        window's audio delayed by `offset` samples (windows.spin)."""
        parts = [replace(p, offset=p.offset + offset) for p in self.parts] if offset else self.parts
        return frame_groups(parts, frames, hop, reach)

    def noise(self, frames: int, hop: int) -> list[tuple[int, int]]:
        """(seed, frames) for each part's run of frames (windows.spans): a file's window k draws from
        (seed, k), the noise it draws alone (restore/pipeline/noise.py)."""
        return [(p.job.seed * 1_000_003 + p.index, b - a) for p, (a, b) in zip(self.parts, spans(self.parts, frames, hop))]


def restored_rows(channels: int, mode: str, levels: audio.Levels | None) -> int:
    """Rows a file of `channels` is restored in: one where its channels are mixed (--channels mix, or
    auto with copies of one signal), else one per channel. `levels` is needed for auto with channels."""
    mix = mode == "mix" or (mode == "auto" and (channels == 1 or levels.channels_identical))
    return 1 if mix else channels


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
        self.rows = restored_rows(info.channels, options.channels, levels)
        self.mix = self.rows == 1
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
                                 text_source, level=options.level,
                                 cutoff_hz=bandwidth.limit(levels.cutoff_hz, model_rate))
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
            yield Window(wave, [Part(self, k, 0, real)], [share] * self.rows)

    def deliver(self, out: np.ndarray) -> bool:
        """The next window's restored audio where it holds this file (rows, n) at the model rate (its
        `Part.cut`); True when it was the last. Non-finite samples fail the file."""
        if not np.isfinite(out).all():
            raise InputError(f"{self.input}: the model produced non-finite samples in window "
                             f"{self.delivered + 1} (damaged model files?)")
        self._emit(self.stitch.push(out.T / self.gain))
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


def sizing(path: str | Path, options: RestoreOptions, model_rate: int) -> tuple[int, tuple[int, bool], int, audio.Levels | None]:
    """What packing (windows.pack) needs to know of a file, found as its FileJob finds it: its length at
    the model rate; its key, the rows it is restored in and whether it has a transcript (files share a
    window only where both agree); its transcript's characters; and its levels where they had to be
    measured to know its rows (a stereo file under --channels auto: a FileJob given them measures no
    more). Raises what opening the file would."""
    info = audio.probe(path)
    levels = audio.scan(info) if options.channels == "auto" and info.channels > 1 else None
    text, _ = find_transcript(Path(path), options.transcript)
    chars = text_mod.tokens(text) - 1
    total = int(round(info.frames * model_rate / info.sample_rate))
    return total, (restored_rows(info.channels, options.channels, levels), chars > 0), chars, levels


def group_windows(group: Sequence[tuple[FileJob | None, int]]) -> Iterator[Window]:
    """The windows of a group of files that windows.pack planned, opened (None: a file that failed to
    open; its place stays silent). A file alone has windows of its own; short files packed together
    share one, each laid in at its offset, their transcripts joined. A file whose reading fails part-way
    is marked failed and yields a window without audio (the deliverer reports it)."""
    if len(group) == 1:
        job = group[0][0]
        if job is not None:
            try:
                yield from job.windows()
            except RestoreError as e:
                job.failed = e
                yield Window(None, [Part(job, -1, 0, 0)], [])
        return
    wave, parts, texts = None, [], []
    for job, offset in group:
        if job is None:
            continue
        try:
            (w,) = list(job.windows())  # a short file: one window
        except RestoreError as e:
            job.failed = e
            yield Window(None, [Part(job, -1, 0, 0)], [])
            continue
        n = min(w.parts[0].length, w.wave.shape[1] - offset)
        if wave is None:
            wave = torch.zeros_like(w.wave)
        wave[:, offset : offset + n] = w.wave[:, :n]
        parts.append(Part(job, 0, offset, n))
        texts.append(w.texts[0])
    if parts:
        text = " ".join(t for t in texts if t) or None
        yield Window(wave, parts, [text] * wave.shape[0])
