"""Codec: audio window <-> latent frames.

The first codec is a fixed invertible transform: a compressed complex STFT (sqrt-Hann windows at 50%
overlap, amplitude compressed as |X|^p e^{i angle X} and scaled to roughly unit variance). A learned codec can
replace it behind the same interface: `frames`, `encode`, `decode`, `latent_dim`, and
`spectrum` / `latents` (latents <-> a complex time-frequency representation the pipeline can mix in).
"""

from __future__ import annotations

from typing import Protocol

import torch

from .config import CodecConfig

_TINY = 1e-12  # keeps the compression differentiable and finite at |X| = 0


def compress(spec: torch.Tensor, config: CodecConfig) -> torch.Tensor:
    """Complex STFT (..., bins) -> latents (..., 2 * bins): |X|^p e^{i angle X}, scaled."""
    re, im = spec.real.float(), spec.imag.float()
    gain = (re.square() + im.square() + _TINY) ** ((config.power - 1.0) / 2.0) * config.scale
    return torch.cat([re * gain, im * gain], dim=-1)


def decompress(latents: torch.Tensor, config: CodecConfig) -> torch.Tensor:
    """Latents (..., 2 * bins) -> complex STFT (..., bins), the compression undone."""
    bins = latents.shape[-1] // 2
    re, im = latents.float()[..., :bins], latents.float()[..., bins:]
    c2 = (re.square() + im.square()) / config.scale**2
    gain = (c2 + _TINY) ** ((1.0 / config.power - 1.0) / 2.0) / config.scale
    return torch.complex(re * gain, im * gain)


class Codec(Protocol):
    config: CodecConfig
    latent_dim: int
    hop: int

    def frames(self, num_samples: int) -> int: ...
    def encode(self, wave: torch.Tensor) -> torch.Tensor: ...
    def decode(self, latents: torch.Tensor) -> torch.Tensor: ...
    def spectrum(self, latents: torch.Tensor) -> torch.Tensor: ...
    def latents(self, spec: torch.Tensor) -> torch.Tensor: ...


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
        return compress(torch.fft.rfft(frames, dim=-1), self.config)

    def latents(self, spec: torch.Tensor) -> torch.Tensor:
        """(B, T, bins) complex STFT -> (B, T, 2 * bins) latents."""
        return compress(spec, self.config)

    def spectrum(self, latents: torch.Tensor) -> torch.Tensor:
        """(B, T, 2 * bins) latents -> (B, T, bins) complex STFT."""
        return decompress(latents, self.config)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """(B, T, 2 * bins) latents -> (B, T * hop) audio."""
        b, t, _ = latents.shape
        frames = torch.fft.irfft(decompress(latents, self.config), n=self.n_fft, dim=-1) * self.window
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
