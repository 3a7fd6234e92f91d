"""Observation skip: the network predicts only what a linear estimator cannot.

Path x_t = (1 - t) x0 + t eps, velocity v = eps - x0. Model the clean latents around a prior mean m
(gain * observation latents for conditioned rows, 0 for the unconditioned branch) as x0 = m + r with
r ~ N(0, var) per dimension. With y = x_t - (1 - t) m = (1 - t) r + t eps, the linear least-squares
estimate of v and the spread around it are

    a(t) = (t - (1 - t) var) / ((1 - t)^2 var + t^2)
    v_lin = -m + a(t) y,        c(t)^2 = 1 + var - a(t) (t - (1 - t) var)

and the network's raw output F scales the remainder: v = v_lin + c(t) F. F = 0 is already the best
linear restorer, exact where the data are Gaussian; the network need not carry unit-variance noise or
the observation through its trunk (a width-384 trunk cannot copy 514-dimensional noise). Pure math,
fp32 inside.
"""

from __future__ import annotations

import torch


def skip_coefficients(t: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """t broadcastable against var -> (a, c), both fp32."""
    t, var = t.float(), var.float()
    cov = t - (1 - t) * var
    a = cov / ((1 - t) ** 2 * var + t**2)
    c = (1 + var - a * cov).clamp_min(1e-8).sqrt()
    return a, c


def skip_velocity(raw: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float, mean: torch.Tensor,
                  var: torch.Tensor) -> torch.Tensor:
    """raw network output F (B, T, D), x_t (B, T, D), t scalar or (B,), prior mean (B, T, D) or 0,
    residual variance (D,) or (B, 1, D) -> velocity (B, T, D) in fp32."""
    t = torch.as_tensor(t, dtype=torch.float32, device=x.device)
    if t.ndim == 1:
        t = t[:, None, None]
    a, c = skip_coefficients(t, var)
    x, mean = x.float(), torch.as_tensor(mean, dtype=torch.float32, device=x.device)
    return -mean + a * (x - (1 - t) * mean) + c * raw.float()
