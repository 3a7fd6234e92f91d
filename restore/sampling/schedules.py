"""Timestep grids for rectified flow: t = 1 is pure noise, t = 0 is data."""

from __future__ import annotations

import torch


def shift_time(t: torch.Tensor, shift: float) -> torch.Tensor:
    """SD3-style shift: shift > 1 moves the grid toward the noise end."""
    return shift * t / (1 + (shift - 1) * t)


def timesteps(steps: int, shift: float = 1.0) -> torch.Tensor:
    """(steps + 1,) float64 grid from 1 down to 0."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    return shift_time(torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64), shift)


def guided_steps(steps: int, guided_until: float) -> list[bool]:
    """Which steps run all three guidance branches: the first round(guided_until * steps)."""
    n = int(round(min(max(guided_until, 0.0), 1.0) * steps))
    return [i < n for i in range(steps)]
