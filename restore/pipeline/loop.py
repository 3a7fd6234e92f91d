"""The sampler loop: guidance and stepping over an engine's branch velocities, as a generator that
yields after every step (the caller decides about progress and cancellation)."""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from ..config import SamplerConfig
from ..sampling import combine, guided_steps, step, timesteps


def fresh_noise_steps(cfg: SamplerConfig) -> list[bool]:
    """Which steps draw fresh noise: the stochastic ones (churn > 0) that do not end at t = 0."""
    ts = timesteps(cfg.steps, cfg.shift).tolist()
    return [cfg.churn > 0 and ts[i + 1] > 0 for i in range(cfg.steps)]


def noise_draws(cfg: SamplerConfig) -> int:
    """How many tensors of noise one sampler loop draws: the start at t = 1 and one per fresh-noise step."""
    return 1 + sum(fresh_noise_steps(cfg))


def generate_latents(engine, noise: torch.Tensor, cfg: SamplerConfig,
                     generator: torch.Generator | Callable[[], torch.Tensor],
                     device: torch.device | str = "cpu", skip=None,
                     level_gain: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                     ) -> Iterator[tuple[int, torch.Tensor]]:
    """noise (B, T, D) drawn at t = 1 -> yields (step index, x) down to t = 0. `skip` (a BoundSkip, for
    models with the observation skip) turns the engine's raw outputs into velocities.

    The steps always run at full strength. A strength s other than 1 then keeps part of the linear
    estimate (the observation skip's clean estimate at the first step with the network's part left out):
    the output is lin + s (x - lin). At one step that is exactly what a network whose output is scaled by
    s gives; at more steps it keeps the sampler sound, where scaling every step's correction would leave
    part of each step's noise in. The linear estimate is a strong shrinkage of the input (gains of
    ~0.1-0.4 on the latents), so with `level_gain` (the codec's) the output takes the audio energy of the
    full-strength result, window by window.

    Fresh noise for stochastic steps comes from the CPU (a generator, or a function drawing one tensor
    of x's shape from per-window generators), so a seed gives the same audio on every engine and plan."""
    if cfg.strength != 1.0 and skip is None:
        raise ValueError("a strength other than 1 needs a model with the observation skip")
    ts = timesteps(cfg.steps, cfg.shift).tolist()
    guided = guided_steps(cfg.steps, cfg.guided_until)
    fresh_steps = fresh_noise_steps(cfg)
    x = noise.float().to(device)
    lin = None
    for i in range(cfg.steps):
        vs = engine.velocities(x, ts[i], guided[i])
        pick = (lambda v3: combine(*v3, cfg.w_so, cfg.w_t)) if guided[i] else (lambda v1: v1[0])
        if skip is not None:
            raw = tuple(v.to(device) for v in vs)
            if i == 0 and cfg.strength != 1.0:
                lin = x - ts[0] * pick(skip(tuple(torch.zeros_like(r) for r in raw), x, ts[0]))
            vs = skip(raw, x, ts[i])
        v = pick(vs)
        fresh = None
        if fresh_steps[i]:
            fresh = (generator() if callable(generator) else torch.randn(x.shape, generator=generator)).to(device)
        x = step(x, v.to(device), ts[i], ts[i + 1], cfg.churn, fresh)
        if lin is None or i < cfg.steps - 1:
            yield i, x
            continue
        out = lin + cfg.strength * (x - lin)
        yield i, (out * level_gain(x, out) if level_gain is not None else out)
