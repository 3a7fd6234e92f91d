"""Restoring one file: stream in, window, condition, sample, decode, crossfade, stream out."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .. import audio, text as text_mod, weights
from ..codec import build_codec
from ..config import SamplerConfig, WindowConfig
from ..engines.base import resolve_plan
from ..engines.torch_engine import TorchEngine
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

    def __init__(self, model: str | Path | None = None, *, plan: str = "auto", device: str = "auto",
                 window: WindowConfig | None = None):
        try:
            self.plan = resolve_plan(plan, device)
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.files = weights.load(model)
        self.model = weights.build_model(self.files, device=self.plan.device)
        self.codec = build_codec(self.files.codec).to(self.plan.device)
        self.sample_rate = self.files.codec.sample_rate
        wc = window or WindowConfig()
        self.geometry = Geometry.from_seconds(wc.seconds, wc.overlap, self.sample_rate, self.codec.hop)
        self.engine = TorchEngine(self.model, self.plan)

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

        def emit(block: np.ndarray, writer: audio.AtomicWriter, last: bool = False) -> None:
            block = back(block, last=last)
            if len(block):
                writer.write(np.repeat(block, out_channels, axis=1) if rows == 1 and out_channels > 1 else block)

        with audio.AtomicWriter(output, out_rate, out_channels, subtype) as writer:
            stream = audio.model_rate_stream(info, sr)
            for k, (win, real) in enumerate(windows(stream, self.geometry, info.channels)):
                x = win.mean(axis=1, keepdims=True) if mix else win  # (L, rows)
                start = k * self.geometry.hop / sr
                share = text_mod.window_share(text, start, start + real / sr, total / sr)
                y = self._window(x.T * gain, [share] * rows, cfg, seed, k, real,
                                 lambda i: progress and progress(Progress(str(input), k, n_windows, i, cfg.steps)))
                emit(stitch.push(y.T / gain, real), writer)
            emit(stitch.finish().reshape(-1, rows), writer, last=True)
            report.clipped_samples = writer.clipped
        if report.clipped_samples:
            report.warnings.append(f"{report.clipped_samples} output samples were clipped to full scale")
        report.seconds_wall = time.perf_counter() - started
        return report

    @torch.inference_mode()
    def _window(self, x: np.ndarray, texts: list[str | None], cfg: SamplerConfig, seed: int, index: int,
                real: int, on_step: Callable[[int], None]) -> np.ndarray:
        """x (rows, L) level-normalised window -> restored (rows, L) at the model rate."""
        dev = self.plan.device
        wave = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dev)
        obs = self.codec.encode(wave)  # (rows, T, D)
        self.engine.begin_window(wave, obs, texts)
        g = torch.Generator().manual_seed(seed * 1_000_003 + index)  # per window: independent of batching
        noise = torch.randn(obs.shape, generator=g)
        latents = None
        for i, latents in generate_latents(self.engine, noise, cfg, g, dev):
            on_step(i)
        out = self.codec.decode(latents).float().cpu().numpy()
        if not np.isfinite(out).all():
            raise InputError(f"window {index + 1}: the model produced non-finite samples (damaged model files?)")
        out[:, real:] = 0.0
        return out
