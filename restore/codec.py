"""Codec: audio window <-> latent frames.

The first codec is a fixed invertible transform: a compressed complex STFT (sqrt-Hann windows at 50%
overlap, amplitude compressed as |X|^p e^{i angle X} and scaled to roughly unit variance). A learned codec can
replace it behind the same interface: `frames`, `encode`, `decode`, `level_gain`, `latent_dim`.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .config import CodecConfig

_TINY = 1e-12  # keeps the compression differentiable and finite at |X| = 0


class Codec(Protocol):
    config: CodecConfig
    latent_dim: int
    hop: int

    def frames(self, num_samples: int) -> int: ...
    def encode(self, wave: torch.Tensor) -> torch.Tensor: ...
    def decode(self, latents: torch.Tensor) -> torch.Tensor: ...
    def level_gain(self, ref: torch.Tensor, est: torch.Tensor) -> torch.Tensor: ...


class STFTCodec(torch.nn.Module):
    """Compressed complex STFT. A window of N samples (N a multiple of hop) gives N / hop frames."""

    def __init__(self, config: CodecConfig | None = None):
        super().__init__()
        self.config = config or CodecConfig()
        c = self.config
        if c.n_fft != 2 * c.hop:
            raise ValueError("STFTCodec needs n_fft == 2 * hop (50% overlap, exact sqrt-Hann inversion)")
        self.hop = c.hop
        self.n_fft = c.n_fft
        self.latent_dim = c.latent_dim
        window = torch.hann_window(c.n_fft, periodic=True, dtype=torch.float64).sqrt()
        self.register_buffer("window", window.float(), persistent=False)

    def frames(self, num_samples: int) -> int:
        if num_samples % self.hop:
            raise ValueError(f"window of {num_samples} samples is not a multiple of hop {self.hop}")
        return num_samples // self.hop

    def samples(self, frames: int) -> int:
        return frames * self.hop

    def encode(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, N) float audio -> (B, T, 2 * bins) latents, T = N / hop."""
        self.frames(wave.shape[-1])
        pad = (self.n_fft - self.hop) // 2
        x = torch.nn.functional.pad(wave.float(), (pad, pad))
        frames = x.unfold(-1, self.n_fft, self.hop) * self.window  # (B, T, n_fft)
        spec = torch.fft.rfft(frames, dim=-1)  # (B, T, bins) complex
        mag2 = spec.real.square() + spec.imag.square()
        gain = (mag2 + _TINY) ** ((self.config.power - 1.0) / 2.0) * self.config.scale
        return torch.cat([spec.real * gain, spec.imag * gain], dim=-1)

    def level_gain(self, ref: torch.Tensor, est: torch.Tensor) -> torch.Tensor:
        """(B, 1, 1): the factor on each row of latents `est` (B, T, 2 * bins) that gives its audio the
        energy of `ref`'s. Energy is the sum of |X|^2 = (|latent| / scale)^(2 / power); scaling latents by
        k scales it by k^(2 / power)."""
        p = self.config.power

        def energy(y: torch.Tensor) -> torch.Tensor:
            bins = y.shape[-1] // 2
            m2 = y[..., :bins].float().square() + y[..., bins:].float().square()
            return m2.pow(1.0 / p).sum((1, 2))

        return ((energy(ref) / energy(est).clamp_min(_TINY)) ** (p / 2))[:, None, None]

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """(B, T, 2 * bins) latents -> (B, T * hop) audio."""
        b, t, d = latents.shape
        bins = d // 2
        re, im = latents.float()[..., :bins], latents.float()[..., bins:]
        c2 = (re.square() + im.square()) / self.config.scale**2
        gain = (c2 + _TINY) ** ((1.0 / self.config.power - 1.0) / 2.0) / self.config.scale
        spec = torch.complex(re * gain, im * gain)
        frames = torch.fft.irfft(spec, n=self.n_fft, dim=-1) * self.window  # (B, T, n_fft)
        length = (t - 1) * self.hop + self.n_fft
        out = torch.nn.functional.fold(
            frames.transpose(1, 2), output_size=(1, length), kernel_size=(1, self.n_fft), stride=(1, self.hop)
        ).reshape(b, length)
        wss = torch.nn.functional.fold(
            self.window.square().expand(1, t, -1).transpose(1, 2),
            output_size=(1, length), kernel_size=(1, self.n_fft), stride=(1, self.hop),
        ).reshape(1, length)
        pad = (self.n_fft - self.hop) // 2
        return (out / wss.clamp_min(1e-8))[:, pad : pad + t * self.hop]


def build_codec(config: CodecConfig) -> STFTCodec:
    if config.kind != "stft":
        raise ValueError(f"unknown codec kind {config.kind!r}")
    return STFTCodec(config)
