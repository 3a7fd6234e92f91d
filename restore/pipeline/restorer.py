"""Restoring one file: stream in, window, condition, sample, decode, crossfade, stream out."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from .. import audio, text as text_mod, weights
from ..codec import build_codec
from ..config import SamplerConfig, WindowConfig
from ..engines.base import Plan, build_engine, resolve_plan
from ..engines.trace import Tracer
from ..errors import InputError, UsageError
from .loop import generate_latents
from .windows import Geometry, Stitcher, windows

LEVEL_RMS = 0.05      # the input level the model was trained at (restore.training.trainer.LEVEL_RMS)
CHANNEL_MODES = ("auto", "each", "mix")


@dataclass
class Progress:
    """What a progress display needs; passed to the callback after every sampler step."""
    file: str
    window: int
    windows: int
    step: int
    steps: int


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
    sampler: dict
    seed: int
    transcript: str          # "given", "sidecar" or "none"
    clipped_samples: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def realtime(self) -> float:
        return self.seconds_audio / max(self.seconds_wall, 1e-9)

    def to_dict(self) -> dict:
        return {**asdict(self), "realtime_factor": round(self.realtime, 3)}


def sampler_config(sampler: str = "pro", steps: int | None = None, guidance: float | None = None) -> SamplerConfig:
    try:
        cfg = SamplerConfig.preset(sampler)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if steps is not None:
        if steps < 1:
            raise UsageError(f"--steps must be at least 1, got {steps}")
        cfg = replace(cfg, steps=steps)
    if guidance is not None:
        if guidance < 0:
            raise UsageError(f"--guidance must be 0 or more, got {guidance}")
        cfg = replace(cfg, w_so=guidance, w_t=guidance)
    return cfg


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


class Restorer:
    """Loads a model once and restores files with it.

    >>> r = Restorer()                       # the shipped default model, best plan for this machine
    >>> r.restore_file("in.wav", "out.wav", sampler="flash")
    """

    def __init__(self, model: str | Path | None = None, *, plan: str | Plan = "auto", device: str = "auto",
                 window: WindowConfig | None = None, mlp_share: float | None = None, trace: bool = False):
        try:
            self.plan = plan if isinstance(plan, Plan) else resolve_plan(plan, device, mlp_share)
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.model_dir = Path(model) if model is not None else weights.DEFAULT_MODEL
        self.files = weights.load(self.model_dir)
        self.model = weights.build_model(self.files, device=self.plan.device)
        self.codec = build_codec(self.files.codec).to(self.plan.device)
        self.sample_rate = self.files.codec.sample_rate
        wc = window or WindowConfig()
        self.geometry = Geometry.from_seconds(wc.seconds, wc.overlap, self.sample_rate, self.codec.hop)
        self.tracer = Tracer(enabled=trace)
        self.engine = build_engine(self.plan, self.model, self.codec, model_dir=self.model_dir,
                                   frames=self.codec.frames(self.geometry.length), samples=self.geometry.length,
                                   tracer=self.tracer)

    def close(self) -> None:
        """Stop the engine's worker process, if the plan has one."""
        self.engine.close()

    def __enter__(self) -> "Restorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def restore_file(self, input: str | Path, output: str | Path, *, sampler: str = "pro",
                     steps: int | None = None, guidance: float | None = None, seed: int = 0,
                     transcript: str | None = None, channels: str = "auto", sample_rate: int | None = None,
                     overwrite: bool = True, progress: Callable[[Progress], None] | None = None) -> FileReport:
        """Restore `input` into `output` (format from its extension, at the input's rate unless
        `sample_rate` is given). The output appears only when complete."""
        started = time.perf_counter()
        input, output = Path(input), Path(output)
        cfg = sampler_config(sampler, steps, guidance)
        if channels not in CHANNEL_MODES:
            raise UsageError(f"--channels must be one of {', '.join(CHANNEL_MODES)}, got {channels!r}")
        if sample_rate is not None and not audio.MIN_RATE <= sample_rate <= audio.MAX_RATE:
            raise UsageError(f"--sample-rate must be {audio.MIN_RATE}-{audio.MAX_RATE} Hz, got {sample_rate}")
        info = audio.probe(input)
        audio.check_output(input, output, overwrite)
        levels = audio.scan(info)
        text, text_source = find_transcript(input, transcript)
        mix = channels == "mix" or (channels == "auto" and levels.channels_identical)
        rows = 1 if mix else info.channels
        out_channels = 1 if channels == "mix" else info.channels
        out_rate = sample_rate or info.sample_rate
        gain = LEVEL_RMS / max(levels.rms, 1e-6)
        sr = self.sample_rate
        total = int(round(info.frames * sr / info.sample_rate))
        n_windows = self.geometry.count(total)
        stitch = Stitcher(self.geometry)
        back = audio.StreamResampler(sr, out_rate, rows)
        subtype = audio.output_subtype(info, output.suffix.lower())
        report = FileReport(str(input), str(output), info.duration, 0.0, n_windows, info.sample_rate, out_rate,
                            info.channels, rows, cfg.to_dict(), seed, text_source)

        # Resampling in and back out can be a sample off the exact length; the output is cut or
        # zero-padded to the input's duration at the output rate (exactly the input's frames at its rate).
        expected = int(round(info.frames * out_rate / info.sample_rate))
        written = 0

        def emit(block: np.ndarray, writer: audio.AtomicWriter, last: bool = False) -> None:
            nonlocal written
            block = back(block, last=last)[: expected - written]
            if last and written + len(block) < expected:
                block = np.concatenate([block, np.zeros((expected - written - len(block), rows), np.float32)])
            if len(block):
                with self.tracer.span("write", "io"):
                    writer.write(np.repeat(block, out_channels, axis=1) if rows == 1 and out_channels > 1 else block)
                written += len(block)

        def source():
            stream = audio.model_rate_stream(info, sr)
            for k, (win, real) in enumerate(windows(stream, self.geometry, info.channels)):
                x = win.mean(axis=1, keepdims=True) if mix else win  # (L, rows)
                start = k * self.geometry.hop / sr
                share = text_mod.window_share(text, start, start + real / sr, total / sr)
                yield torch.from_numpy(np.ascontiguousarray(x.T * gain, dtype=np.float32)), real, [share] * rows

        def on_step(k: int, i: int) -> None:
            if progress:
                progress(Progress(str(input), k, n_windows, i, cfg.steps))

        warned = len(self.engine.warnings)
        with audio.AtomicWriter(output, out_rate, out_channels, subtype) as writer:
            for y, real in self._pipeline(source(), cfg, seed, on_step):
                emit(stitch.push(y.T / gain, real), writer)
            emit(stitch.finish().reshape(-1, rows), writer, last=True)
            report.clipped_samples = writer.clipped
        report.warnings += self.engine.warnings[warned:]
        if report.clipped_samples:
            report.warnings.append(f"{report.clipped_samples} output samples were clipped to full scale")
        report.seconds_wall = time.perf_counter() - started
        return report

    def _pipeline(self, source, cfg: SamplerConfig, seed: int, on_step) -> Iterator[tuple[np.ndarray, int]]:
        """Windows through the engine, codec work overlapped with sampling: window k+1's encode is queued
        before window k samples, and window k's decode after it; plans with a worker run both in the
        idle time they declare. The first window's encode has nothing to overlap and starts at once.
        Yields each restored window (rows, L) at the model rate with its count of real samples."""
        eng = self.engine
        read = lambda: next(source, None)
        with self.tracer.span("read", "io"):
            nxt = read()
        enc = eng.encode_async(nxt[0], urgent=True) if nxt is not None else None
        pending = None
        k = 0
        while nxt is not None:
            (wave, real, texts), obs = nxt, eng.result(enc)
            with self.tracer.span("read", "io"):
                nxt = read()
            enc = eng.encode_async(nxt[0]) if nxt is not None else None
            with self.tracer.span(f"window {k + 1}", "pipeline"):
                latents = self._sample(wave, obs, texts, cfg, seed, k, on_step)
            eng.idle()  # between windows the worker's engine has no branch to run
            if pending is not None:
                yield self._finish(*pending)
            pending = (eng.decode_async(latents), real, k)
            k += 1
        if pending is not None:
            yield self._finish(*pending)

    @torch.inference_mode()
    def _sample(self, wave, obs, texts, cfg: SamplerConfig, seed: int, index: int, on_step) -> torch.Tensor:
        """One window's sampler loop: level-normalised wave (rows, N), obs (rows, T, D) -> latents."""
        self.engine.begin_window(wave, obs, texts)
        g = torch.Generator().manual_seed(seed * 1_000_003 + index)  # per window: independent of batching
        noise = torch.randn(obs.shape, generator=g)
        latents = None
        for i, latents in generate_latents(self.engine, noise, cfg, g, self.plan.device):
            on_step(index, i)
        return latents

    def _finish(self, handle, real: int, index: int) -> tuple[np.ndarray, int]:
        out = self.engine.result(handle).float().cpu().numpy()
        if not np.isfinite(out).all():
            raise InputError(f"window {index + 1}: the model produced non-finite samples (damaged model files?)")
        out[:, real:] = 0.0
        return out, real
