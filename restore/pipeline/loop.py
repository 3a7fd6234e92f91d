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

    A strength below 1 keeps part of the linear estimate, which is a strong shrinkage of the input
    (gains of ~0.1-0.4 on the latents): on its own it would leave the output ~9 dB quieter than the
    model's full estimate. With `level_gain` (the codec's), the final latents take the audio energy of
    the full-strength clean estimate at the first step, window by window.

    Fresh noise for stochastic steps comes from the CPU (a generator, or a function drawing one tensor
    of x's shape from per-window generators), so a seed gives the same audio on every engine and plan."""
    if cfg.strength != 1.0 and skip is None:
        raise ValueError("a strength other than 1 needs a model with the observation skip")
    ts = timesteps(cfg.steps, cfg.shift).tolist()
    guided = guided_steps(cfg.steps, cfg.guided_until)
    fresh_steps = fresh_noise_steps(cfg)
    x = noise.float().to(device)
    match = skip is not None and cfg.strength != 1.0 and level_gain is not None
    gain = full = None
    for i in range(cfg.steps):
        vs = engine.velocities(x, ts[i], guided[i])
        if skip is not None:
            raw = tuple(v.to(device) for v in vs)
            if match and i == 0:
                full = skip(raw, x, ts[i])
            if cfg.strength != 1.0:  # the raw outputs are the network's part of each velocity
                raw = tuple(r * cfg.strength for r in raw)
            vs = skip(raw, x, ts[i])
        v = combine(*vs, cfg.w_so, cfg.w_t) if guided[i] else vs[0]
        if full is not None:  # the full-strength and the scaled clean estimate at the first step
            v_full = combine(*full, cfg.w_so, cfg.w_t) if guided[i] else full[0]
            gain, full = level_gain(x - ts[i] * v_full, x - ts[i] * v), None
        fresh = None
        if fresh_steps[i]:
            fresh = (generator() if callable(generator) else torch.randn(x.shape, generator=generator)).to(device)
        x = step(x, v.to(device), ts[i], ts[i + 1], cfg.churn, fresh)
        yield i, (x * gain if gain is not None and i == cfg.steps - 1 else x)
