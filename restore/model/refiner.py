"""The band refiner: a small convolutional network over the time-frequency plane that corrects the
sampler's estimate of the clean latents, bin by bin.

The trunk sees each latent frame as one flat 514-dimensional vector and writes it back through one
linear layer, so it cannot easily shape the fine structure across neighbouring bins: the noise between
a voice's harmonics, a consonant's onset in the upper bins. The models that remove noise well from
little data (GTCRN, DeepFilterNet) work on the frequency axis with shared local filters. The refiner
does that once per window, after the sampler: from the estimate and the degraded observation (real,
imaginary and magnitude planes of each) it computes a correction that is added to the estimate. Its
last layer starts at zero, so a model that gains a refiner computes exactly what it did before.

It runs in PyTorch beside the observation skip (restore/weights.build_refiner), whatever engine runs
the trunk: a few tens of GFLOP per 30 s window, about a fifth of one trunk pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import RefinerConfig


class Refiner(nn.Module):
    def __init__(self, config: RefinerConfig):
        super().__init__()
        self.config = config
        c = config.channels
        self.inp = nn.Conv2d(6, c, 3, padding=1)
        self.convs = nn.ModuleList(
            nn.Conv2d(c, c, 3, padding=(d, 1), dilation=(d, 1)) for d in config.dilations
        )
        self.mixes = nn.ModuleList(nn.Conv2d(c, c, 1) for _ in config.dilations)
        self.out = nn.Conv2d(c, 2, 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    @staticmethod
    def planes(latents: torch.Tensor) -> torch.Tensor:
        """(B, T, 2 bins) latents -> (B, 3, T, bins): real, imaginary, magnitude."""
        re, im = latents.float().chunk(2, dim=-1)
        return torch.stack([re, im, (re.square() + im.square() + 1e-8).sqrt()], dim=1)

    def forward(self, est: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """est, obs (B, T, 2 bins) latents -> the refined estimate (B, T, 2 bins)."""
        dtype = self.inp.weight.dtype
        h = F.gelu(self.inp(torch.cat([self.planes(est), self.planes(obs)], dim=1).to(dtype)))
        for conv, mix in zip(self.convs, self.mixes):
            h = h + mix(F.gelu(conv(h)))
        d = self.out(F.gelu(h)).float()  # (B, 2, T, bins)
        return est.float() + torch.cat([d[:, 0], d[:, 1]], dim=-1)
