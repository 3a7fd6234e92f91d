"""The degradation simulator: damages clean speech the way real recordings are damaged.

Seeded, composable, device-agnostic torch, batched: parameters are drawn per clip on the CPU (so a
seed gives the same choices everywhere), then every effect runs once over all the clips it applies to,
without host synchronisation (every host-made value reaches the device through transfer.to_device,
never a blocking copy), so it keeps up with training on the GPU. Each effect has its own
probability and parameter range (DegradeConfig) and they apply in the order a signal meets them:

  reverb -> eq -> noise -> hum -> clip -> bandlimit -> codec -> dropout -> gain

Every call returns, per clip, a JSON-serialisable record of what was applied, so results can be
broken down per degradation type.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..config import BaseConfig
from .transfer import to_device

KINDS = ("reverb", "eq", "noise", "hum", "clip", "bandlimit", "codec", "dropout", "gain")


@dataclass(frozen=True)
class DegradeConfig(BaseConfig):
    sample_rate: int = 16000
    p_clean: float = 0.0                # share of clips left as they are (drawn first; the rest as below, of
                                        # which ~4% get no effect either): a restorer must leave alone what
                                        # needs no restoring
    p_single: float = 0.0               # share of the damaged clips given exactly one effect, drawn evenly
                                        # from the kinds whose probability is above 0 (drawn after p_clean):
                                        # composed effects rarely leave intact speech anywhere, and a
                                        # restorer must learn to keep what one mild effect left intact
    p_reverb: float = 0.35
    rt60: tuple = (0.2, 1.5)            # seconds, simulated rooms
    drr_db: tuple = (-6.0, 12.0)        # direct-to-reverberant ratio of simulated rooms
    p_real_rir: float = 0.25            # share of reverberated clips that use a recorded RIR
    p_eq: float = 0.3
    eq_db: float = 12.0                 # largest boost/cut of a microphone colouring band
    p_noise: float = 0.75
    snr_db: tuple = (-5.0, 30.0)
    p_synthetic_noise: float = 0.25     # coloured noise instead of a recording
    p_babble: float = 0.0               # babble instead of a recording: 3-8 talkers from the training speech
    p_noise_pair: float = 0.0           # a second recording under the first (0 to 10 dB below it)
    p_noise_colour: float = 0.0         # the noise re-coloured by a random smooth curve (as eq does speech)
    p_noise_bursts: float = 0.0         # the noise's level moved every 0.25 s (0 to -20 dB): it comes and goes
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
    """Parameter draws from one seeded host generator, identical on every device: a CPU torch.Generator
    (the stream the test sets are made with) or a random.Random (training: ~1,000 draws a batch, and as
    torch calls each one handed the GIL to the training step and back)."""

    def __init__(self, generator: torch.Generator | random.Random):
        self.g = generator
        self.py = isinstance(generator, random.Random)

    def _unit(self) -> float:
        return self.g.random() if self.py else torch.rand((), generator=self.g).item()

    def uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * self._unit()

    def chance(self, p: float) -> bool:
        return self._unit() < p

    def integer(self, lo: int, hi: int) -> int:  # inclusive
        if self.py:
            return self.g.randint(lo, hi)
        return int(torch.randint(lo, hi + 1, (), generator=self.g).item())

    def seed(self) -> int:
        if self.py:
            return self.g.getrandbits(62)
        return int(torch.randint(0, 2**62, (), generator=self.g).item())


def _randn(shape, seeds: list[int], device) -> torch.Tensor:
    """Gaussian noise, one row per seed, drawn on `device` (deterministic per device)."""
    out = torch.empty(shape, device=device)
    for i, s in enumerate(seeds):
        g = torch.Generator(device=device).manual_seed(s)
        out[i] = torch.randn(shape[1:], generator=g, device=device)
    return out


def _power(x: torch.Tensor) -> torch.Tensor:
    return x.square().mean(-1)


def _filter(x: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """Zero-phase filtering of rows x (S, N) by magnitude responses (S, R) sampled uniformly from 0 Hz to
    Nyquist."""
    n, pad = x.shape[-1], 2048
    spec = torch.fft.rfft(F.pad(x, (pad, pad)))
    resp = F.interpolate(response[:, None], size=spec.shape[-1], mode="linear", align_corners=True)[:, 0]
    return torch.fft.irfft(spec * resp, n=n + 2 * pad)[:, pad : pad + n]


def _convolve(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Rows x (S, N) convolved with rows h (S, K), truncated to N."""
    n = x.shape[-1] + h.shape[-1] - 1
    size = 1 << (n - 1).bit_length()
    return torch.fft.irfft(torch.fft.rfft(x, size) * torch.fft.rfft(h, size), size)[:, : x.shape[-1]]


def _scale_to_snr(x: torch.Tensor, interference: torch.Tensor, snr_db: torch.Tensor) -> torch.Tensor:
    """Interference scaled so that power(x) / power(scaled) = snr; zero where either is silent."""
    px, pi = _power(x), _power(interference)
    gain = torch.where((px > 0) & (pi > 0), torch.sqrt(px / (pi.clamp_min(1e-30) * 10 ** (snr_db / 10))),
                       torch.zeros_like(px))
    return interference * gain[:, None]


class Degrader:
    """Degrades batches of clean audio. `noises` and `rirs` are 1-D tensors at the config's rate."""

    def __init__(self, config: DegradeConfig | None = None, noises: Sequence[torch.Tensor] = (),
                 rirs: Sequence[torch.Tensor] = (), noise_names: Sequence[str] | None = None,
                 rir_names: Sequence[str] | None = None, talkers: torch.Tensor | None = None):
        """`talkers`: a 1-D bank of speech (int16 or float, at the config's rate) that babble is cut from."""
        self.config = config or DegradeConfig()
        self.talkers = talkers
        if self.config.p_babble > 0 and (talkers is None or len(talkers) == 0):
            raise ValueError("p_babble needs a bank of talkers' speech")
        self.noise_names = list(noise_names or [f"noise{i}" for i in range(len(noises))])
        self.rir_names = list(rir_names or [f"rir{i}" for i in range(len(rirs))])
        self.noise_lengths = [int(n.shape[0]) for n in noises]
        self.noise_offsets = np.concatenate([[0], np.cumsum(self.noise_lengths)])[:-1].tolist()
        self.noise_bank = torch.cat([n.float() for n in noises]) if len(noises) else torch.zeros(1)
        self.rirs = torch.stack([self._prepare_rir(r) for r in rirs]) if len(rirs) else None

    def to(self, device) -> "Degrader":
        self.noise_bank = self.noise_bank.to(device)
        self.talkers = self.talkers.to(device) if self.talkers is not None else None
        self.rirs = self.rirs.to(device) if self.rirs is not None else None
        return self

    # ---- public ----
    def __call__(self, clean: torch.Tensor, generator: torch.Generator | random.Random,
                 kinds: Sequence[str] | None = None) -> tuple[torch.Tensor, list[list[dict]]]:
        """clean (B, N) -> degraded (B, N) and, per clip, the list of effects applied.

        With `kinds` given, exactly those effects are applied to every clip (in the fixed order);
        otherwise each effect is drawn with its probability. `generator`: a CPU torch.Generator or a
        random.Random (each gives its own stream, the same on every device)."""
        if kinds is not None:
            unknown = set(kinds) - set(KINDS)
            if unknown:
                raise ValueError(f"unknown degradation kinds {sorted(unknown)}; known: {KINDS}")
        d = _Draw(generator)
        b, n = clean.shape
        plans = [self._draw(d, kinds, n) for _ in range(b)]
        return self.apply(clean, plans)

    def apply(self, clean: torch.Tensor, plans: list[dict[str, dict]]) -> tuple[torch.Tensor, list[list[dict]]]:
        """Apply drawn plans (one per clip), each effect once over all the clips it applies to."""
        b = clean.shape[0]
        x = clean.float().clone()
        for kind in KINDS:
            rows = [i for i in range(b) if kind in plans[i]]
            if rows:
                idx = to_device(rows, x.device)
                x[idx] = getattr(self, "_" + kind)(x[idx], [plans[i][kind] for i in rows])
        records = [[{"kind": k, **{p: v for p, v in plan[k].items() if not p.startswith("_")}}
                    for k in KINDS if k in plan] for plan in plans]
        return torch.nan_to_num(x), records

    # ---- parameter draws (CPU, per clip) ----
    def _draw(self, d: _Draw, kinds, n: int) -> dict[str, dict]:
        c, sr = self.config, self.config.sample_rate
        on = (lambda k, p: (k in kinds) if kinds is not None else d.chance(p))
        plan: dict[str, dict] = {}
        if kinds is None and c.p_clean > 0 and d.chance(c.p_clean):  # no draw at 0: the streams stay as they were
            return plan
        if kinds is None and c.p_single > 0 and d.chance(c.p_single):
            enabled = [k for k in KINDS if getattr(c, "p_" + k) > 0]
            kinds = (enabled[d.integer(0, len(enabled) - 1)],)
        if on("reverb", c.p_reverb):
            if self.rirs is not None and d.chance(c.p_real_rir):
                i = d.integer(0, len(self.rir_names) - 1)
                plan["reverb"] = {"rir": self.rir_names[i], "_index": i}
            else:
                rt60, drr = d.uniform(*c.rt60), d.uniform(*c.drr_db)
                refl = [(int(d.uniform(0.001, 0.05) * sr), (1 if d.chance(0.5) else -1) * d.uniform(0.1, 0.6))
                        for _ in range(d.integer(6, 16))]
                plan["reverb"] = {"rir": "simulated", "rt60_s": rt60, "drr_db": drr, "_reflections": refl,
                                  "_seed": d.seed()}
        if on("eq", c.p_eq):
            peaks = [(d.uniform(1.0, 7.3), d.uniform(0.3, 1.5), d.uniform(-c.eq_db, c.eq_db)) for _ in range(3)]
            plan["eq"] = {"tilt_db_per_octave": d.uniform(-2.0, 2.0),
                          "peaks_hz_db": [[round(50 * 2**ctr), g] for ctr, _, g in peaks], "_peaks": peaks}
        if on("noise", c.p_noise):
            snr = d.uniform(*c.snr_db)
            # the variations below draw nothing while their probability is 0, so test sets made before
            # they existed stay as they were
            if c.p_babble > 0 and d.chance(c.p_babble):
                talkers = [(d.integer(0, len(self.talkers) - n - 1), d.uniform(-6.0, 0.0))
                           for _ in range(d.integer(3, 8))]
                plan["noise"] = {"snr_db": snr, "source": f"babble({len(talkers)})", "_talkers": talkers}
            elif not self.noise_lengths or d.chance(c.p_synthetic_noise):
                slope = d.uniform(-1.0, 1.0)  # spectral slope: -1 brown-ish .. 0 white .. 1 blue-ish
                plan["noise"] = {"snr_db": snr, "source": f"synthetic(slope={slope:.2f})", "_slope": slope,
                                 "_seed": d.seed()}
            else:
                i = d.integer(0, len(self.noise_lengths) - 1)
                plan["noise"] = {"snr_db": snr, "source": self.noise_names[i], "_index": i,
                                 "_start": d.integer(0, self.noise_lengths[i] - 1)}
            noise = plan["noise"]
            if c.p_noise_pair > 0 and self.noise_lengths and d.chance(c.p_noise_pair):
                j = d.integer(0, len(self.noise_lengths) - 1)
                noise.update(pair=self.noise_names[j], pair_db=d.uniform(-10.0, 0.0), _pair=j,
                             _pair_start=d.integer(0, self.noise_lengths[j] - 1))
            if c.p_noise_colour > 0 and d.chance(c.p_noise_colour):
                peaks = [(d.uniform(1.0, 7.3), d.uniform(0.3, 1.5), d.uniform(-12.0, 12.0)) for _ in range(3)]
                noise.update(colour_tilt=d.uniform(-3.0, 3.0), _colour=peaks)
            if c.p_noise_bursts > 0 and d.chance(c.p_noise_bursts):
                noise.update(bursts=True, _envelope=[d.uniform(-20.0, 0.0) if d.chance(0.5) else 0.0
                                                     for _ in range(n // (sr // 4) + 2)])
        if on("hum", c.p_hum):
            f0 = 50.0 if d.chance(0.5) else 60.0
            snr = d.uniform(*c.hum_snr_db)
            plan["hum"] = {"f0_hz": f0, "snr_db": snr,
                           "_harmonics": [(d.uniform(0.0, 1.0) / k, d.uniform(0, 2 * math.pi)) for k in range(1, 9)]}
        if on("clip", c.p_clip):
            plan["clip"] = {"level_of_peak": d.uniform(*c.clip_fraction)}
        if on("bandlimit", c.p_bandlimit):
            plan["bandlimit"] = {"cutoff_hz": d.uniform(*c.bandwidth_hz)}
        if on("codec", c.p_codec):
            if d.chance(0.5):
                plan["codec"] = {"codec": "transform", "band_snr_db": d.uniform(*c.codec_snr_db),
                                 "cutoff_hz": d.uniform(3500.0, 7000.0)}
            else:
                plan["codec"] = {"codec": "telephone-mulaw"}
        if on("dropout", c.p_dropout):
            gaps = []
            for _ in range(d.integer(*c.dropout_count)):
                length = int(d.uniform(*c.dropout_ms) / 1000 * sr)
                start = d.integer(0, max(0, n - length - 1))
                gaps.append([start / sr, length / sr])
            plan["dropout"] = {"gaps_s": gaps}
        if on("gain", c.p_gain):
            plan["gain"] = {"gain_db": d.uniform(*c.gain_db)}
        return plan

    # ---- effects: rows x (S, N) and one parameter dict per row ----
    def _reverb(self, x, params):
        k = int(self.config.rir_seconds * self.config.sample_rate)
        h = torch.zeros(len(params), k, device=x.device)
        sim = [i for i, p in enumerate(params) if p["rir"] == "simulated"]
        if sim:
            h[to_device(sim, x.device)] = self.simulated_rirs([params[i] for i in sim], x.device)
        real = [i for i, p in enumerate(params) if p["rir"] != "simulated"]
        if real:
            h[to_device(real, x.device)] = self.rirs[to_device([params[i]["_index"] for i in real], x.device)]
        return _convolve(x, h)

    def simulated_rirs(self, params: list[dict], device) -> torch.Tensor:
        """Statistical room model, (S, K): direct path at t = 0, sparse early reflections (1-50 ms), and
        an exponentially decaying noise tail whose decay is faster at high frequencies (air and wall
        absorption). Tail energy sets the direct-to-reverberant ratio."""
        sr = self.config.sample_rate
        k = int(self.config.rir_seconds * sr)
        s = len(params)
        t = torch.arange(k, device=device) / sr
        rt60 = to_device([p["rt60_s"] for p in params], device)[:, None]
        drr = to_device([p["drr_db"] for p in params], device)[:, None]
        early = np.zeros((s, k), dtype=np.float32)  # filled in numpy: no torch call per reflection
        early[:, 0] = 1.0
        for i, p in enumerate(params):
            for delay, amp in p["_reflections"]:
                early[i, delay] += amp * math.exp(-6.91 * delay / sr / p["rt60_s"])
        spec = torch.fft.rfft(_randn((s, k), [p["_seed"] for p in params], device))
        freqs = torch.fft.rfftfreq(k, 1 / sr, device=device)
        tail = torch.zeros(s, k, device=device)
        for lo, hi, factor in ((0, 500, 1.25), (500, 4000, 1.0), (4000, sr / 2 + 1, 0.6)):
            band = torch.fft.irfft(spec * ((freqs >= lo) & (freqs < hi)), n=k)
            tail = tail + band * torch.exp(-6.91 * t / (rt60 * factor))
        tail = tail * torch.clamp((t - 0.002) / 0.01, 0, 1)  # the tail builds up after the direct sound
        tail = tail * torch.sqrt(10 ** (-drr / 10) / tail.square().sum(-1, keepdim=True).clamp_min(1e-12))
        return to_device(early, device) + tail

    def simulated_rir(self, rt60: float, drr_db: float, seed: int = 0, device="cpu") -> torch.Tensor:
        """One simulated RIR (K,) with no early reflections beyond the direct path."""
        return self.simulated_rirs([{"rt60_s": rt60, "drr_db": drr_db, "_reflections": [], "_seed": seed}],
                                   device)[0]

    def _prepare_rir(self, h: torch.Tensor) -> torch.Tensor:
        """Recorded RIR: start at the direct-path peak (keeps the speech time-aligned with the clean
        target), peak 1, fixed length."""
        h = h.float()
        h = h[int(h.abs().argmax()):]
        h = h / h.abs().max()
        k = int(self.config.rir_seconds * self.config.sample_rate)
        return F.pad(h[:k], (0, max(0, k - h.shape[0])))

    def _eq(self, x, params):
        """Microphone colouring: a smooth random gain curve over log-frequency (a tilt plus three
        peaks or dips), applied zero-phase."""
        return self._colour(x, [p["tilt_db_per_octave"] for p in params], [p["_peaks"] for p in params])

    def _colour(self, x, tilts: list[float], peak_lists: list) -> torch.Tensor:
        """Rows x (S, N) through smooth gain curves over log-frequency: a tilt (dB per octave) plus
        peaks or dips (centre in octaves above 50 Hz, width in octaves, gain in dB), zero-phase."""
        sr = self.config.sample_rate
        grid = torch.linspace(0, 1, 257, device=x.device)
        logf = torch.log2(grid.clamp_min(1 / 256) * sr / 2 / 50)  # octaves above 50 Hz
        tilt = to_device(tilts, x.device)[:, None]
        peaks = to_device(peak_lists, x.device)  # (S, 3, centre / width / gain)
        db = tilt * (logf - logf.mean())
        for j in range(peaks.shape[1]):
            center, width, gain = (peaks[:, j, m, None] for m in range(3))
            db = db + gain * torch.exp(-0.5 * ((logf - center) / width) ** 2)
        return _filter(x, 10 ** (db / 20))

    def _recordings(self, index: list[int], start: list[int], n: int, device) -> torch.Tensor:
        """(len(rows), n): noise recordings `index`, each looped from its `start`."""
        lengths = to_device([self.noise_lengths[i] for i in index], device)
        offsets = to_device([self.noise_offsets[i] for i in index], device)
        starts = to_device(start, device)
        pos = (starts[:, None] + torch.arange(n, device=device)[None]) % lengths[:, None] + offsets[:, None]
        return self.noise_bank[pos]

    def _noise(self, x, params):
        s, n = x.shape
        sr = self.config.sample_rate
        noise = torch.zeros_like(x)
        rec = [i for i, p in enumerate(params) if "_index" in p]
        if rec:
            noise[to_device(rec, x.device)] = self._recordings(
                [params[i]["_index"] for i in rec], [params[i]["_start"] for i in rec], n, x.device)
        bab = [i for i, p in enumerate(params) if "_talkers" in p]
        if bab:
            talkers = [(row, start, 10 ** (g / 20)) for row, i in enumerate(bab) for start, g in params[i]["_talkers"]]
            starts = to_device([t[1] for t in talkers], x.device)
            pieces = self.talkers[starts[:, None] + torch.arange(n, device=x.device)[None]].float()
            pieces = pieces / pieces.square().mean(-1, keepdim=True).sqrt().clamp_min(1e-6)  # each talker at unit level
            mix = torch.zeros(len(bab), n, device=x.device)
            mix.index_add_(0, to_device([t[0] for t in talkers], x.device),
                           pieces * to_device([t[2] for t in talkers], x.device)[:, None])
            noise[to_device(bab, x.device)] = mix
        pair = [i for i, p in enumerate(params) if "_pair" in p]
        if pair:
            second = self._recordings([params[i]["_pair"] for i in pair],
                                      [params[i]["_pair_start"] for i in pair], n, x.device)
            first = noise[to_device(pair, x.device)]
            db = to_device([params[i]["pair_db"] for i in pair], x.device)
            noise[to_device(pair, x.device)] = first + _scale_to_snr(first, second, -db)
        col = [i for i, p in enumerate(params) if "_colour" in p]
        if col:
            rows = to_device(col, x.device)
            noise[rows] = self._colour(noise[rows], [params[i]["colour_tilt"] for i in col],
                                       [params[i]["_colour"] for i in col])
        env = [i for i, p in enumerate(params) if "_envelope" in p]
        if env:
            db = to_device([params[i]["_envelope"] for i in env], x.device)  # (S, knots) every 0.25 s
            gain = F.interpolate((10 ** (db / 20))[:, None], size=db.shape[-1] * (sr // 4), mode="linear",
                                 align_corners=False)[:, 0, :n]
            noise[to_device(env, x.device)] = noise[to_device(env, x.device)] * gain
        syn = [i for i, p in enumerate(params) if "_slope" in p]
        if syn:
            spec = torch.fft.rfft(_randn((len(syn), n), [params[i]["_seed"] for i in syn], x.device))
            f = torch.fft.rfftfreq(n, 1 / sr, device=x.device).clamp_min(20.0)
            slope = to_device([params[i]["_slope"] for i in syn], x.device)[:, None]
            noise[to_device(syn, x.device)] = torch.fft.irfft(spec * (f / 1000.0) ** slope, n=n)
        snr = to_device([p["snr_db"] for p in params], x.device)
        return x + _scale_to_snr(x, noise, snr)

    def _hum(self, x, params):
        t = torch.arange(x.shape[-1], device=x.device) / self.config.sample_rate
        f0 = to_device([p["f0_hz"] for p in params], x.device)[:, None]
        harmonics = to_device([p["_harmonics"] for p in params], x.device)  # (S, 8, amplitude / phase)
        hum = torch.zeros_like(x)
        for k in range(harmonics.shape[1]):
            amp, phase = harmonics[:, k, 0, None], harmonics[:, k, 1, None]
            hum = hum + amp * torch.sin(2 * math.pi * f0 * (k + 1) * t + phase)
        snr = to_device([p["snr_db"] for p in params], x.device)
        return x + _scale_to_snr(x, hum, snr)

    def _clip(self, x, params):
        frac = to_device([p["level_of_peak"] for p in params], x.device)[:, None]
        level = frac * x.abs().amax(-1, keepdim=True)
        return torch.maximum(torch.minimum(x, level), -level)

    def _bandlimit(self, x, params):
        """Low-pass: flat below cutoff - 150 Hz, raised-cosine to zero at the cutoff."""
        f = torch.linspace(0, self.config.sample_rate / 2, 2049, device=x.device)
        cutoff = to_device([p["cutoff_hz"] for p in params], x.device)[:, None]
        ramp = ((cutoff - f) / 150.0).clamp(0, 1)
        return _filter(x, 0.5 - 0.5 * torch.cos(math.pi * ramp))

    def _codec(self, x, params):
        out = x.clone()
        tr = [i for i, p in enumerate(params) if p["codec"] == "transform"]
        tel = [i for i, p in enumerate(params) if p["codec"] != "transform"]
        if tr:
            rows = to_device(tr, x.device)
            out[rows] = self._transform_codec(x[rows], [params[i] for i in tr])
        if tel:
            rows = to_device(tel, x.device)
            out[rows] = self._telephone_codec(x[rows])
        return out

    def _transform_codec(self, x, params):
        """MP3/AAC-like artefacts: per-band quantisation of a 50%-overlap transform at a low SNR per band
        (small coefficients become spectral holes), plus the codec's low-pass."""
        sr, n_fft, hop = self.config.sample_rate, 512, 256
        s, n = x.shape
        win = torch.hann_window(n_fft, periodic=True, device=x.device).sqrt()
        pad = n_fft
        xp = F.pad(x, (pad, pad + (-(n + 2 * pad)) % hop))
        spec = torch.fft.rfft(xp.unfold(-1, n_fft, hop) * win)  # (S, frames, bins)
        bins = spec.shape[-1]
        snr = to_device([p["band_snr_db"] for p in params], x.device)[:, None, None]
        cutoff = to_device([p["cutoff_hz"] for p in params], x.device)[:, None, None]
        freqs = torch.arange(bins, device=x.device) * sr / n_fft
        edges = torch.round(torch.logspace(0, math.log10(bins), 22)).long().unique().tolist()
        out = torch.zeros_like(spec)
        for lo, hi in zip(edges[:-1], edges[1:]):
            band = spec[..., lo:hi]
            rms = band.abs().square().mean(-1, keepdim=True).sqrt()
            step = rms * 10 ** (-(snr - 3.0 * lo / bins) / 20) * math.sqrt(12) + 1e-9
            out[..., lo:hi] = torch.complex(torch.round(band.real / step), torch.round(band.imag / step)) * step
        frames = torch.fft.irfft(out * (freqs < cutoff), n=n_fft) * win  # (S, frames, n_fft)
        y = F.fold(frames.transpose(1, 2), output_size=(1, xp.shape[-1]), kernel_size=(1, n_fft),
                   stride=(1, hop)).reshape(s, -1)
        return y[:, pad : pad + n]

    def _telephone_codec(self, x):
        """G.711-like: 300-3400 Hz telephone band, 8-bit mu-law quantisation, and the band filter again
        (a real line carries 8 kHz samples, so quantisation noise cannot reach above 4 kHz)."""
        f = torch.linspace(0, self.config.sample_rate / 2, 2049, device=x.device)
        resp = (((f - 200.0) / 100.0).clamp(0, 1) * ((3500.0 - f) / 100.0).clamp(0, 1)).expand(len(x), -1)
        y = _filter(x, resp)
        peak = y.abs().amax(-1, keepdim=True).clamp_min(1e-9)
        u = (y / peak).clamp(-1, 1)
        mu = 255.0
        comp = torch.round(torch.sign(u) * torch.log1p(mu * u.abs()) / math.log1p(mu) * 127.0) / 127.0
        return _filter(torch.sign(comp) * ((1 + mu) ** comp.abs() - 1) / mu * peak, resp)

    def _dropout(self, x, params):
        sr = self.config.sample_rate
        gaps = max(len(p["gaps_s"]) for p in params)
        starts = torch.zeros(len(params), gaps, dtype=torch.long)
        ends = torch.zeros(len(params), gaps, dtype=torch.long)
        for i, p in enumerate(params):
            for j, (start, length) in enumerate(p["gaps_s"]):
                starts[i, j] = round(start * sr)
                ends[i, j] = round(start * sr) + round(length * sr)
        t = torch.arange(x.shape[-1], device=x.device)
        starts, ends = to_device(starts, x.device)[..., None], to_device(ends, x.device)[..., None]
        silent = ((t >= starts) & (t < ends)).any(1)
        return x.masked_fill(silent, 0.0)

    def _gain(self, x, params):
        db = to_device([p["gain_db"] for p in params], x.device)[:, None]
        return x * 10 ** (db / 20)


def degrade_clip(clean: np.ndarray, *, seed: int, kinds: Sequence[str] | None = None,
                 noises: Sequence[np.ndarray] = (), rirs: Sequence[np.ndarray] = (),
                 noise_names: Sequence[str] | None = None, rir_names: Sequence[str] | None = None,
                 config: DegradeConfig | None = None) -> tuple[np.ndarray, list[dict]]:
    """One clip on the CPU: clean (N,) float at config.sample_rate -> (degraded (N,), effects applied)."""
    deg = Degrader(config, [torch.as_tensor(np.asarray(n, dtype=np.float32)) for n in noises],
                   [torch.as_tensor(np.asarray(r, dtype=np.float32)) for r in rirs], noise_names, rir_names)
    g = torch.Generator().manual_seed(seed)
    y, rec = deg(torch.as_tensor(np.asarray(clean, dtype=np.float32))[None], g, kinds)
    return y[0].numpy(), rec[0]
