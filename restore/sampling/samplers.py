"""Stochastic rectified-flow sampling steps. Pure math over tensors, fp32 inside, no model reference.

Path: x_t = (1 - t) x0 + t z, velocity v = z - x0, z the source sample (source.py: pure noise eps, or
the observation plus sigma eps). From a velocity estimate at time t:
  x0_hat  = x - t v        z_hat = x + (1 - t) v
A step to s < t re-noises part of the noise z_hat holds, eps_hat = (z_hat - mean) / sigma:
  x_s = (1 - s) x0_hat + s (mean + sigma (sqrt(1 - c^2) eps_hat + c noise))
where c = churn * (the DDPM posterior std of x_s given x_t and x0) / (s sigma). churn = 0 is the Euler step of
the flow ODE (exactly x + (s - t) v); churn = 1 is ancestral sampling. Because the fresh-noise variance
shrinks with the step size, every churn in [0, 1] converges to the data distribution as steps grow.
"""

from __future__ import annotations

import math

import torch

from .source import NOISE, Source


def renoise_fraction(t: float, s: float, churn: float) -> float:
    """c in [0, 1]: the share of the noise estimate replaced by fresh noise on a step from t to s."""
    if churn <= 0.0 or s <= 0.0 or t <= s:
        return 0.0
    alpha = (1.0 - t) / (1.0 - s)          # x_t = alpha x_s + beta noise (the forward step s -> t)
    beta2 = max(t * t - alpha * alpha * s * s, 0.0)
    return min(1.0, churn * math.sqrt(beta2) / t)


def step(x: torch.Tensor, v: torch.Tensor, t: float, t_next: float, churn: float = 0.0,
         noise: torch.Tensor | None = None, source: Source = NOISE) -> torch.Tensor:
    """One step from t to t_next (t > t_next) on the path from `source`. Returns fp32."""
    x, v = x.float(), v.float()
    x0 = x - t * v
    z = x + (1.0 - t) * v
    c = renoise_fraction(t, t_next, churn)
    if c > 0.0:
        if noise is None:
            raise ValueError("a stochastic step (churn > 0) needs noise")
        z = source.sample(math.sqrt(1.0 - c * c) * source.noise_of(z) + c * noise.float())
    return (1.0 - t_next) * x0 + t_next * z
