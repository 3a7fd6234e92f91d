"""Timestep grids for rectified flow: t = 1 is pure noise, t = 0 is data."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Schedule:
    """Every network evaluation of one sampler loop: step i goes from times[i] to times[i + 1], runs the
    guidance branches if guided[i], and re-noises with churn[i] (samplers.step)."""
    times: list[float]
    guided: list[bool]
    churn: list[float]

    @property
    def evaluations(self) -> int:
        return len(self.guided)

    def fresh_noise(self) -> list[bool]:
        """Which steps draw fresh noise: those that re-noise and do not land on t = 0."""
        return [c > 0 and t > 0 for c, t in zip(self.churn, self.times[1:])]


def schedule(steps: int, shift: float = 1.0, guided_until: float = 0.0, churn: float = 0.0,
             refine_from: float = 1.0) -> Schedule:
    """From pure noise (refine_from = 1): `steps` steps on the shifted grid, the first round(guided_until
    * steps) guided. Refining (refine_from < 1): first one unguided step at t = 1, whose clean estimate
    (the one-step restoration) is re-noised in full to t = refine_from; the `steps` steps then go from
    there to 0 on the same grid scaled into [0, refine_from], guided as above. The steps then add only
    what the one-step estimate leaves out instead of drawing the whole signal from noise."""
    if not 0.0 < refine_from <= 1.0:
        raise ValueError(f"refine_from must be in (0, 1], got {refine_from}")
    grid = timesteps(steps, shift)
    guided = guided_steps(steps, guided_until)
    if refine_from >= 1.0:
        return Schedule(grid.tolist(), guided, [churn] * steps)
    return Schedule([1.0] + (refine_from * grid).tolist(), [False] + guided, [1.0] + [churn] * steps)
