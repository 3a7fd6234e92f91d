"""Condition encoders: semantic features of the degraded audio, and the transcript text encoder."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config import CodecConfig, EncoderConfig, TextConfig
from .layers import RMSNorm, SwiGLU, apply_rotary, rotary_tables


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float = 20.0,
                   fmax: float | None = None) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters on the HTK mel scale from fmin to fmax (default: half
    the sample rate), area-normalised."""
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10.0 ** (np.asarray(m) / 2595.0) - 1.0)

    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    top = sample_rate / 2 if fmax is None else fmax
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(top), n_mels + 2))
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    fb = np.maximum(0.0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
    return (fb * (2.0 / (hi - lo))).astype(np.float32)


def reach(config: EncoderConfig) -> int:
    """Latent frames either side of a frame that its features depend on (the convolutions' reach)."""
    return (config.kernel // 2) * (config.layers + 1)


def group_norm(norm: nn.GroupNorm, h: torch.Tensor, groups: torch.Tensor | None) -> torch.Tensor:
    """`norm` (one group: statistics over all channels and frames of a row) of h (B, W, T). With frame
    groups (B, T) (restore/pipeline/windows.py frame_groups), as the attention keeps them apart
    (layers.group_mask): a part's frames take the statistics of its frames and of the silence (group
    0), the silence weighted to stand for all the padding the part would have alone (the window's other
    frames); the silence takes its own. No part reaches another through them."""
    if groups is None:
        return norm(h)
    with torch.autocast(h.device.type, enabled=False):  # statistics in fp32, whatever the plan's dtype
        return _grouped_norm(norm, h, groups)


def _grouped_norm(norm: nn.GroupNorm, h: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    x = h.float()
    onehot = F.one_hot(groups, int(groups.max()) + 1).float()  # (B, T, K); column 0: the silence
    frames = onehot.sum(1)                                        # (B, K)
    sums = torch.stack([x.sum(1), x.square().sum(1)], 1) @ onehot  # (B, 2, K): sums and sums of squares
    # a part's statistics count the silence (b, 0) as the padding it would have alone: T - its frames
    weight = torch.where(frames[:, :1] > 0, (groups.shape[1] - frames) / frames[:, :1].clamp_min(1), 0.0)
    weight[:, 0] = 0.0
    count = (frames + weight * frames[:, :1]) * x.shape[1]
    moments = (sums + weight[:, None] * sums[:, :, :1]) / count.clamp_min(1)[:, None]
    mean, var = moments[:, 0], (moments[:, 1] - moments[:, 0].square()).clamp_min(0)
    pick = lambda m: m.gather(1, groups)[:, None]  # noqa: E731  (B, 1, T): each frame's group's
    y = (x - pick(mean)) * torch.rsqrt(pick(var) + norm.eps) * norm.weight.float()[:, None] + norm.bias.float()[:, None]
    whole = (groups == groups[:, :1]).all(1)  # rows of one recording: the GroupNorm itself, exactly
    exact = F.group_norm(x, norm.num_groups, norm.weight.float(), norm.bias.float(), norm.eps)
    return torch.where(whole[:, None, None], exact, y).to(h.dtype)


class SemanticEncoder(nn.Module):
    """Degraded audio (B, N) -> features (B, T, out_dim) on the codec's frame grid (T = N / hop).

    Log-mel frames aligned with the codec's frames, then a residual stack of 1-D convolutions.
    It runs once per window, outside the sampler loop. A frame's features depend on the audio within
    `reach` frames of it, and on statistics of the window (its GroupNorms): where recordings share a
    window, `groups` keeps those apart too (`group_norm`).
    """

    def __init__(self, config: EncoderConfig, codec: CodecConfig):
        super().__init__()
        self.config, self.codec = config, codec
        self.register_buffer(
            "fb", torch.from_numpy(mel_filterbank(codec.sample_rate, codec.n_fft, config.n_mels)), persistent=False
        )
        self.register_buffer("window", torch.hann_window(codec.n_fft, periodic=True), persistent=False)
        w, k = config.width, config.kernel
        self.inp = nn.Conv1d(config.n_mels, w, k, padding=k // 2)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({
                "norm": nn.GroupNorm(1, w),
                "conv": nn.Conv1d(w, w, k, padding=k // 2),
                "proj": nn.Conv1d(w, w, 1),
            })
            for _ in range(config.layers)
        )
        self.out = nn.Linear(w, config.out_dim)

    def log_mel(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, N) -> (B, n_mels, T) log-mel on the codec's frame grid."""
        n_fft, hop = self.codec.n_fft, self.codec.hop
        pad = (n_fft - hop) // 2
        x = F.pad(wave.float(), (pad, pad)).unfold(-1, n_fft, hop) * self.window  # (B, T, n_fft)
        power = torch.fft.rfft(x, dim=-1).abs().square()  # (B, T, bins)
        mel = power @ self.fb.T  # (B, T, n_mels)
        return torch.log(mel + 1e-6).transpose(1, 2) * 0.25

    def forward(self, wave: torch.Tensor, groups: torch.Tensor | None = None) -> torch.Tensor:
        """wave (B, N); groups (B, T) or None."""
        h = self.inp(self.log_mel(wave))  # (B, W, T)
        for blk in self.blocks:
            h = h + blk["proj"](F.gelu(blk["conv"](group_norm(blk["norm"], h, groups))))
        return self.out(h.transpose(1, 2))  # (B, T, out_dim)


class TextEncoder(nn.Module):
    """Token ids (B, L) -> text states (B, L, width). Id 0 is the learned null token; every sequence
    starts with it, and a text-free branch is the null token alone."""

    def __init__(self, config: TextConfig, eps: float = 1e-6):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.width)
        self.layers = nn.ModuleList(
            nn.ModuleDict({
                "attn_norm": RMSNorm(config.width, eps),
                "qkv": nn.Linear(config.width, 3 * config.width, bias=True),
                "o": nn.Linear(config.width, config.width, bias=False),
                "mlp_norm": RMSNorm(config.width, eps),
                "mlp": SwiGLU(config.width, config.width * 8 // 3),
            })
            for _ in range(config.layers)
        )
        self.norm = RMSNorm(config.width, eps)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, l = ids.shape
        h = self.embed(ids)  # (B, L, Wt)
        heads = self.config.heads
        hd = self.config.width // heads
        cos, sin = rotary_tables(l, hd, 10000.0, device=ids.device)
        attn_mask = mask[:, None, None, :]  # (B, 1, 1, L): keys that exist
        for layer in self.layers:
            q, k, v = layer["qkv"](layer["attn_norm"](h)).view(b, l, 3, heads, hd).permute(2, 0, 3, 1, 4)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            h = h + layer["o"](y.transpose(1, 2).reshape(b, l, -1))
            h = h + layer["mlp"](layer["mlp_norm"](h))
        return self.norm(h)


def timestep_features(t: torch.Tensor, dim: int) -> torch.Tensor:
    """(B,) t in [0, 1] -> (B, dim) sinusoidal features."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    ang = (t.float() * 1000.0)[:, None] * freqs[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=-1)
