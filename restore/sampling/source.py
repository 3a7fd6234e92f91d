"""Where a model's flow starts at t = 1 (`ModelConfig.source`). Pure math, fp32, no model reference.

The path is x_t = (1 - t) x0 + t z with velocity v = z - x0, for a source sample z:
  noise:        z = eps                      (mean 0, scale 1)
  observation:  z = y + sigma eps            (y the degraded input's latents, sigma = source_sigma)
With the observation as source the flow is a bridge from what was heard to the clean latents: the
first step starts from the observation, and each later step corrects a state that already holds the
estimate so far, with sigma the share of fresh noise the path carries (0: the path is deterministic
given the observation, and every sampler gives the one-step estimate; larger: more is drawn).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SOURCES = ("noise", "observation")


@dataclass(frozen=True)
class Source:
    """One batch's source: z = mean + sigma * noise, mean 0 or the observation latents (B, T, D)."""
    mean: torch.Tensor | float = 0.0
    sigma: float = 1.0

    def sample(self, noise: torch.Tensor) -> torch.Tensor:
        """The source sample for a draw of unit noise, fp32."""
        return self.mean_like(noise) + self.sigma * noise.float()

    def mean_like(self, x: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.mean, dtype=torch.float32, device=x.device)

    def noise_of(self, z: torch.Tensor) -> torch.Tensor:
        """The unit noise a source sample (or its estimate) holds: (z - mean) / sigma."""
        return (z.float() - self.mean_like(z)) / self.sigma


NOISE = Source()


def check_source(kind: str, sigma: float) -> None:
    """Refuse a source a model cannot have (ValueError)."""
    if kind not in SOURCES:
        raise ValueError(f"unknown flow source {kind!r}: choose {' or '.join(SOURCES)}")
    if kind == "observation" and not sigma > 0:
        raise ValueError(f"the observation as flow source needs source_sigma > 0, got {sigma!r}")


def source_for(kind: str, sigma: float, obs: torch.Tensor) -> Source:
    """The source of a model whose config says `kind` and `sigma`, for a batch with observation latents obs."""
    check_source(kind, sigma)
    return NOISE if kind == "noise" else Source(obs.float(), float(sigma))
