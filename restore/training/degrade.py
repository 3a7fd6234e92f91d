"""The degradation simulator: damages clean speech the way real recordings are damaged.

Seeded, composable, batched, device-agnostic torch (it runs on the GPU during training and on the CPU
to build test sets). Each effect has its own probability and parameter range (DegradeConfig) and is
applied in the order a signal meets them:

  reverb -> eq -> noise -> hum -> clip -> bandlimit -> codec -> dropout -> gain

Every call returns, per clip, a JSON-serialisable record of what was applied, so results can be
broken down per degradation type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..config import BaseConfig

KINDS = ("reverb", "eq", "noise", "hum", "clip", "bandlimit", "codec", "dropout", "gain")


@dataclass(frozen=True)
class DegradeConfig(BaseConfig):
    sample_rate: int = 16000
    p_reverb: float = 0.35
    rt60: tuple = (0.2, 1.5)            # seconds, simulated rooms
    drr_db: tuple = (-6.0, 12.0)        # direct-to-reverberant ratio of simulated rooms
    p_real_rir: float = 0.25            # share of reverberated clips that use a recorded RIR
    p_eq: float = 0.3
    eq_db: float = 12.0                 # largest boost/cut of a microphone colouring band
    p_noise: float = 0.75
    snr_db: tuple = (-5.0, 30.0)
    p_synthetic_noise: float = 0.25     # coloured noise instead of a recording
    p_hum: float = 0.12
    hum_snr_db: tuple = (0.0, 30.0)
    p_clip: float = 0.15
    clip_fraction: tuple = (0.05, 0.5)  # clip level as a fraction of the clip's peak
    p_bandlimit: float = 0.3
    bandwidth_hz: tuple = (2000.0, 7000.0)
    p_codec: float = 0.25
    codec_snr_db: tuple = (4.0, 16.0)   # per-band quantisation SNR of the transform codec
    p_dropout: float = 0.1
    dropout_ms: tuple = (20.0, 150.0)
    dropout_count: tuple = (1, 6)
    p_gain: float = 0.3
    gain_db: tuple = (-30.0, 0.0)
    rir_seconds: float = 1.6            # length of every impulse response (fixed shape for batching)


class _Draw:
    """Parameter draws from one seeded CPU generator: identical on every device."""

    def __init__(self, generator: torch.Generator):
        self.g = generator

    def uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * torch.rand((), generator=self.g).item()

    def chance(self, p: float) -> bool:
        return torch.rand((), generator=self.g).item() < p

    def integer(self, lo: int, hi: int) -> int:  # inclusive
        return int(torch.randint(lo, hi + 1, (), generator=self.g).item())

    def normal(self, shape, device) -> torch.Tensor:
        return torch.randn(shape, generator=self.g).to(device)


def _power(x: torch.Tensor) -> torch.Tensor:
    return x.square().mean(-1)


def _fft_filter(x: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """Zero-phase filter: x (N,) times the magnitude response sampled on rfft bins of len(x) + pad."""
    n = x.shape[-1]
    pad = 2048
    spec = torch.fft.rfft(torch.nn.functional.pad(x, (pad, pad)))
    resp = torch.nn.functional.interpolate(response[None, None], size=spec.shape[-1], mode="linear",
                                           align_corners=True)[0, 0]
    return torch.fft.irfft(spec * resp, n=n + 2 * pad)[pad : pad + n]


def _fft_convolve(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1] + h.shape[-1] - 1
    size = 1 << (n - 1).bit_length()
    return torch.fft.irfft(torch.fft.rfft(x, size) * torch.fft.rfft(h, size), size)[: x.shape[-1]]


class Degrader:
    """Degrades batches of clean audio. `noises` and `rirs` are 1-D tensors at the config's rate."""

    def __init__(self, config: DegradeConfig | None = None, noises: Sequence[torch.Tensor] = (),
                 rirs: Sequence[torch.Tensor] = (), noise_names: Sequence[str] | None = None,
                 rir_names: Sequence[str] | None = None):
        self.config = config or DegradeConfig()
        self.noises = [n.float() for n in noises]
        self.noise_names = list(noise_names or [f"noise{i}" for i in range(len(self.noises))])
        self.rirs = [self._prepare_rir(r) for r in rirs]
        self.rir_names = list(rir_names or [f"rir{i}" for i in range(len(self.rirs))])

    def to(self, device) -> "Degrader":
        self.noises = [n.to(device) for n in self.noises]
        self.rirs = [r.to(device) for r in self.rirs]
        return self

    # ---- public ----
    def __call__(self, clean: torch.Tensor, generator: torch.Generator,
                 kinds: Sequence[str] | None = None) -> tuple[torch.Tensor, list[list[dict]]]:
        """clean (B, N) -> degraded (B, N) and, per clip, the list of effects applied.

        With `kinds` given, exactly those effects are applied to every clip (in the fixed order);
        otherwise each effect is drawn with its probability. `generator` must be a CPU generator.
        """
        if kinds is not None:
            unknown = set(kinds) - set(KINDS)
            if unknown:
                raise ValueError(f"unknown degradation kinds {sorted(unknown)}; known: {KINDS}")
        draw = _Draw(generator)
        out, records = [], []
        for x in clean.float():
            y, rec = self._one(x, draw, kinds)
            out.append(y)
            records.append(rec)
        return torch.stack(out), records

    # ---- one clip ----
    def _one(self, x: torch.Tensor, d: _Draw, kinds):
        c = self.config
        rec: list[dict] = []
        on = (lambda k, p: (k in kinds) if kinds is not None else d.chance(p))
        if on("reverb", c.p_reverb):
            x = self.reverb(x, d, rec)
        if on("eq", c.p_eq):
            x = self.eq(x, d, rec)
        if on("noise", c.p_noise):
            x = self.noise(x, d, rec)
        if on("hum", c.p_hum):
            x = self.hum(x, d, rec)
        if on("clip", c.p_clip):
            x = self.clip(x, d, rec)
        if on("bandlimit", c.p_bandlimit):
            x = self.bandlimit(x, d.uniform(*c.bandwidth_hz), rec)
        if on("codec", c.p_codec):
            x = self.codec(x, d, rec)
        if on("dropout", c.p_dropout):
            x = self.dropout(x, d, rec)
        if on("gain", c.p_gain):
            g = d.uniform(*c.gain_db)
            x = x * 10 ** (g / 20)
            rec.append({"kind": "gain", "gain_db": g})
        return torch.nan_to_num(x), rec

    # ---- effects (each takes one clip (N,) and appends its record) ----
    def reverb(self, x, d: _Draw, rec):
        c = self.config
        if self.rirs and d.chance(c.p_real_rir):
            i = d.integer(0, len(self.rirs) - 1)
            h = self.rirs[i]
            rec.append({"kind": "reverb", "rir": self.rir_names[i]})
        else:
            rt60, drr = d.uniform(*c.rt60), d.uniform(*c.drr_db)
            h = self.simulated_rir(rt60, drr, d, x.device)
            rec.append({"kind": "reverb", "rir": "simulated", "rt60_s": rt60, "drr_db": drr})
        return _fft_convolve(x, h.to(x.device))

    def simulated_rir(self, rt60: float, drr_db: float, d: _Draw, device) -> torch.Tensor:
        """Statistical room model: direct path at t=0, sparse early reflections (1-50 ms), and an
        exponentially decaying noise tail whose decay is faster at high frequencies (air and wall
        absorption). Tail energy sets the direct-to-reverberant ratio."""
        sr = self.config.sample_rate
        k = int(self.config.rir_seconds * sr)
        t = torch.arange(k, device=device) / sr
        h = torch.zeros(k, device=device)
        h[0] = 1.0
        for _ in range(d.integer(6, 16)):
            delay = int(d.uniform(0.001, 0.05) * sr)
            h[delay] += (1 if d.chance(0.5) else -1) * d.uniform(0.1, 0.6) * math.exp(-6.91 * delay / sr / rt60)
        noise = d.normal((k,), device)
        spec = torch.fft.rfft(noise)
        freqs = torch.fft.rfftfreq(k, 1 / sr).to(device)
        tail = torch.zeros(k, device=device)
        for lo, hi, factor in ((0, 500, 1.25), (500, 4000, 1.0), (4000, sr / 2 + 1, 0.6)):
            band = torch.fft.irfft(spec * ((freqs >= lo) & (freqs < hi)), n=k)
            tail = tail + band * torch.exp(-6.91 * t / (rt60 * factor))
        onset = torch.clamp((t - 0.002) / 0.01, 0, 1)  # the tail builds up after the direct sound
        tail = tail * onset
        tail = tail * math.sqrt(10 ** (-drr_db / 10) / tail.square().sum().clamp_min(1e-12).item())
        return h + tail

    def _prepare_rir(self, h: torch.Tensor) -> torch.Tensor:
        """Recorded RIR: start at the direct-path peak (keeps the speech time-aligned with the clean
        target), peak 1, fixed length."""
        h = h.float()
        h = h[int(h.abs().argmax()):]
        h = h / h.abs().max()
        k = int(self.config.rir_seconds * self.config.sample_rate)
        return torch.nn.functional.pad(h[:k], (0, max(0, k - h.shape[0])))

    def eq(self, x, d: _Draw, rec):
        """Microphone colouring: a smooth random gain curve over log-frequency (a tilt plus three
        peaks or dips), applied zero-phase."""
        c = self.config
        grid = torch.linspace(0, 1, 257, device=x.device)  # linear frequency 0..Nyquist
        logf = torch.log2(grid.clamp_min(1 / 256) * c.sample_rate / 2 / 50)  # octaves above 50 Hz
        tilt = d.uniform(-2.0, 2.0)
        db = tilt * (logf - logf.mean())
        bands = []
        for _ in range(3):
            center, width, gain = d.uniform(1.0, 7.3), d.uniform(0.3, 1.5), d.uniform(-c.eq_db, c.eq_db)
            db = db + gain * torch.exp(-0.5 * ((logf - center) / width) ** 2)
            bands.append([round(50 * 2**center), gain])
        rec.append({"kind": "eq", "tilt_db_per_octave": tilt, "peaks_hz_db": bands})
        return _fft_filter(x, 10 ** (db / 20))

    def noise(self, x, d: _Draw, rec):
        c = self.config
        n = x.shape[-1]
        snr = d.uniform(*c.snr_db)
        if not self.noises or d.chance(c.p_synthetic_noise):
            colour = d.uniform(-1.0, 1.0)  # spectral slope: -1 brown-ish .. 0 white .. 1 blue-ish
            spec = torch.fft.rfft(d.normal((n,), x.device))
            f = torch.fft.rfftfreq(n, 1 / c.sample_rate).to(x.device).clamp_min(20.0)
            noise = torch.fft.irfft(spec * (f / 1000.0) ** (colour / 2 * 2), n=n)
            source = f"synthetic(slope={colour:.2f})"
        else:
            i = d.integer(0, len(self.noises) - 1)
            bank = self.noises[i]
            reps = -(-(n + bank.shape[0]) // bank.shape[0])
            start = d.integer(0, bank.shape[0] - 1)
            noise = bank.repeat(reps)[start : start + n]
            source = self.noise_names[i]
        px, pn = _power(x), _power(noise)
        if px <= 0 or pn <= 0:
            return x
        noise = noise * torch.sqrt(px / (pn * 10 ** (snr / 10)))
        rec.append({"kind": "noise", "snr_db": snr, "source": source})
        return x + noise

    def hum(self, x, d: _Draw, rec):
        c = self.config
        f0 = 50.0 if d.chance(0.5) else 60.0
        snr = d.uniform(*c.hum_snr_db)
        t = torch.arange(x.shape[-1], device=x.device) / c.sample_rate
        hum = torch.zeros_like(x)
        for k in range(1, 9):
            hum = hum + d.uniform(0.0, 1.0) / k * torch.sin(2 * math.pi * f0 * k * t + d.uniform(0, 2 * math.pi))
        px, ph = _power(x), _power(hum)
        if px <= 0 or ph <= 0:
            return x
        rec.append({"kind": "hum", "f0_hz": f0, "snr_db": snr})
        return x + hum * torch.sqrt(px / (ph * 10 ** (snr / 10)))

    def clip(self, x, d: _Draw, rec):
        frac = d.uniform(*self.config.clip_fraction)
        level = frac * x.abs().max()
        rec.append({"kind": "clip", "level_of_peak": frac})
        return x.clamp(-level, level)

    def bandlimit(self, x, cutoff: float, rec):
        """Low-pass at `cutoff` Hz: flat below cutoff - 150 Hz, raised-cosine to zero at cutoff."""
        sr = self.config.sample_rate
        f = torch.linspace(0, sr / 2, 2049, device=x.device)
        ramp = ((cutoff - f) / 150.0).clamp(0, 1)
        resp = 0.5 - 0.5 * torch.cos(math.pi * ramp)
        rec.append({"kind": "bandlimit", "cutoff_hz": cutoff})
        return _fft_filter(x, resp)

    def codec(self, x, d: _Draw, rec):
        if d.chance(0.5):
            return self._transform_codec(x, d, rec)
        return self._telephone_codec(x, rec)

    def _transform_codec(self, x, d: _Draw, rec):
        """MP3/AAC-like artefacts: per-band quantisation of a 50%-overlap MDCT-like transform at a low
        SNR per band (small coefficients become spectral holes), plus the codec's low-pass."""
        sr, n_fft, hop = self.config.sample_rate, 512, 256
        snr = d.uniform(*self.config.codec_snr_db)
        cutoff = d.uniform(3500.0, 7000.0)
        n = x.shape[-1]
        win = torch.hann_window(n_fft, periodic=True, device=x.device).sqrt()
        pad = n_fft
        xp = torch.nn.functional.pad(x, (pad, pad + (-(n + 2 * pad)) % hop))
        frames = xp.unfold(-1, n_fft, hop) * win  # (F, n_fft)
        spec = torch.fft.rfft(frames)
        bins = spec.shape[-1]
        edges = torch.round(torch.logspace(0, math.log10(bins), 22, device=x.device)).long().unique()
        freqs = torch.arange(bins, device=x.device) * sr / n_fft
        out = torch.zeros_like(spec)
        for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist()):
            band = spec[:, lo:hi]
            rms = band.abs().square().mean(-1, keepdim=True).sqrt()
            step = rms * 10 ** (-(snr - 3.0 * lo / bins) / 20) * math.sqrt(12) + 1e-9
            out[:, lo:hi] = torch.complex(torch.round(band.real / step), torch.round(band.imag / step)) * step
        out = out * (freqs < cutoff)
        frames = torch.fft.irfft(out, n=n_fft) * win
        y = torch.nn.functional.fold(frames.T[None], output_size=(1, xp.shape[-1]), kernel_size=(1, n_fft),
                                     stride=(1, hop)).reshape(-1)
        rec.append({"kind": "codec", "codec": "transform", "band_snr_db": snr, "cutoff_hz": round(cutoff)})
        return y[pad : pad + n]

    def _telephone_codec(self, x, rec):
        """G.711-like: 300-3400 Hz telephone band, 8-bit mu-law quantisation, and the band filter again
        (a real line carries 8 kHz samples, so quantisation noise cannot reach above 4 kHz)."""
        sr = self.config.sample_rate
        f = torch.linspace(0, sr / 2, 2049, device=x.device)
        resp = ((f - 200.0) / 100.0).clamp(0, 1) * ((3500.0 - f) / 100.0).clamp(0, 1)
        y = _fft_filter(x, resp)
        peak = y.abs().max().clamp_min(1e-9)
        u = (y / peak).clamp(-1, 1)
        mu = 255.0
        comp = torch.sign(u) * torch.log1p(mu * u.abs()) / math.log1p(mu)
        comp = torch.round(comp * 127.0) / 127.0
        y = _fft_filter(torch.sign(comp) * ((1 + mu) ** comp.abs() - 1) / mu * peak, resp)
        rec.append({"kind": "codec", "codec": "telephone-mulaw"})
        return y

    def dropout(self, x, d: _Draw, rec):
        c = self.config
        n = x.shape[-1]
        x = x.clone()
        gaps = []
        for _ in range(d.integer(*c.dropout_count)):
            length = int(d.uniform(*c.dropout_ms) / 1000 * c.sample_rate)
            start = d.integer(0, max(0, n - length - 1))
            x[start : start + length] = 0.0
            gaps.append([start / c.sample_rate, length / c.sample_rate])
        rec.append({"kind": "dropout", "gaps_s": gaps})
        return x


def degrade_clip(clean: np.ndarray, *, seed: int, kinds: Sequence[str] | None = None,
                 noises: Sequence[np.ndarray] = (), rirs: Sequence[np.ndarray] = (),
                 noise_names: Sequence[str] | None = None, rir_names: Sequence[str] | None = None,
                 config: DegradeConfig | None = None) -> tuple[np.ndarray, list[dict]]:
    """One clip on the CPU: clean (N,) float at config.sample_rate -> (degraded (N,), effects applied)."""
    deg = Degrader(config, [torch.as_tensor(n) for n in noises], [torch.as_tensor(r) for r in rirs],
                   noise_names, rir_names)
    g = torch.Generator().manual_seed(seed)
    y, rec = deg(torch.as_tensor(np.asarray(clean, dtype=np.float32))[None], g, kinds)
    return y[0].numpy(), rec[0]
