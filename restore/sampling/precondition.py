"""Observation skip: the network predicts only what a linear estimator cannot.

Path x_t = (1 - t) x0 + t z, velocity v = z - x0, the source sample z = mu + sigma eps (source.py: mu = 0
and sigma = 1 for pure noise). Model the clean latents around a prior mean m (gain * observation latents
for conditioned rows, 0 for the unconditioned branch) as x0 = m + r with r ~ N(0, var) per dimension.
With y = x_t - (1 - t) m - t mu = (1 - t) r + t sigma eps, the linear least-squares estimate of v and
the spread around it are

    a(t) = (t sigma^2 - (1 - t) var) / ((1 - t)^2 var + t^2 sigma^2)
    v_lin = mu - m + a(t) y,        c(t)^2 = sigma^2 + var - a(t) (t sigma^2 - (1 - t) var)

and the network's raw output F scales the remainder: v = v_lin + c(t) F. F = 0 is already the best
linear restorer, exact where the data are Gaussian; the network need not carry unit-variance noise or
the observation through its trunk (a width-384 trunk cannot copy 514-dimensional noise). Pure math,
fp32 inside.
"""

from __future__ import annotations

import torch

from .source import NOISE, Source


def skip_coefficients(t: torch.Tensor, var: torch.Tensor, sigma: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """t broadcastable against var, the source's noise scale sigma -> (a, c), both fp32."""
    t, var, s2 = t.float(), var.float(), sigma * sigma
    cov = t * s2 - (1 - t) * var
    a = cov / ((1 - t) ** 2 * var + t**2 * s2)
    c = (s2 + var - a * cov).clamp_min(1e-8).sqrt()
    return a, c


def skip_velocity(raw: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float, mean: torch.Tensor,
                  var: torch.Tensor, source: Source = NOISE, local_var: torch.Tensor | None = None) -> torch.Tensor:
    """raw network output F (B, T, D), x_t (B, T, D), t scalar or (B,), prior mean (B, T, D) or 0,
    residual variance (D,) or (B, 1, D), the path's source -> velocity (B, T, D) in fp32.

    local_var (B, T, D), where given, is the residual's variance bin by bin (ObsSkip: small where the
    observation is quiet) and sets the linear part's gain a(t); c(t), the scale of F, stays that of var.
    At t = 1, a = 1 whatever the variance, so the one-step estimate is the same with or without it. Below
    t = 1 the state is mostly source noise in a quiet bin, and the global a keeps that noise in the
    estimate (at t = 1/8 and var 0.3, all of it), for the network to take out dimension by dimension,
    which it does not manage; the local a takes it out where the observation says there is little to keep."""
    t = torch.as_tensor(t, dtype=torch.float32, device=x.device)
    if t.ndim == 1:
        t = t[:, None, None]
    a, c = skip_coefficients(t, var, source.sigma)
    if local_var is not None:
        a, _ = skip_coefficients(t, local_var, source.sigma)
    x, mean, mu = x.float(), torch.as_tensor(mean, dtype=torch.float32, device=x.device), source.mean_like(x)
    return mu - mean + a * (x - (1 - t) * mean - t * mu) + c * raw.float()
