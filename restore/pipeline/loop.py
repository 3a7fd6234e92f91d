"""The sampler loop: guidance and stepping over an engine's branch velocities, as a generator that
yields after every step (the caller decides about progress and cancellation). It always samples at
full strength; restore/pipeline/post.py does what comes after."""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from ..config import SamplerConfig
from ..sampling import NOISE, Source, combine, step


def fresh_noise_steps(cfg: SamplerConfig) -> list[bool]:
    """Which steps draw fresh noise: the stochastic ones that do not end at t = 0."""
    return cfg.schedule().fresh_noise()


def noise_draws(cfg: SamplerConfig) -> int:
    """How many tensors of noise one sampler loop draws: the start at t = 1 and one per fresh-noise step."""
    return 1 + sum(fresh_noise_steps(cfg))


def generate_latents(engine, start: torch.Tensor, cfg: SamplerConfig,
                     generator: torch.Generator | Callable[[], torch.Tensor],
                     device: torch.device | str = "cpu", skip=None, source: Source = NOISE,
                     first: Callable[[torch.Tensor], None] | None = None) -> Iterator[tuple[int, torch.Tensor]]:
    """start (B, T, D), the source sample at t = 1 (`source.sample` of the first noise drawn) -> yields
    (step index, x) down to t = 0, one per network evaluation of the sampler's schedule. `skip` (a
    BoundSkip, for models with the observation skip) turns the engine's raw outputs into velocities.

    Fresh noise for stochastic steps comes from the CPU (a generator, or a function drawing one tensor
    of x's shape from per-window generators), so a seed gives the same audio on every engine and plan.
    `first`, if given, is called with the first step's clean estimate (the one-step restoration, where
    the schedule starts at t = 1) before the loop goes on."""
    plan = cfg.schedule()
    ts, guided, fresh_steps = plan.times, plan.guided, plan.fresh_noise()
    x = start.float().to(device)
    for i in range(plan.evaluations):
        vs = engine.velocities(x, ts[i], guided[i])
        if skip is not None:
            vs = skip(tuple(v.to(device) for v in vs), x, ts[i])
        v = combine(*vs, cfg.w_so, cfg.w_t) if guided[i] else vs[0]
        if i == 0:
            estimate = x - ts[0] * v.to(device)
            if first is not None:
                first(estimate)
            if cfg.anchor > 0 and skip is not None and ts[0] >= 1.0:
                # the later steps' prior: this first estimate, where the network is best (docs/training.md)
                skip = skip.anchored(estimate, cfg.anchor)
        fresh = None
        if fresh_steps[i]:
            fresh = (generator() if callable(generator) else torch.randn(x.shape, generator=generator)).to(device)
        x = step(x, v.to(device), ts[i], ts[i + 1], plan.churn[i], fresh, source)
        yield i, x
