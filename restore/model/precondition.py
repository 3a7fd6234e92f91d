"""The observation skip's parameters (see restore/sampling/precondition.py for the math): a gain on the
observation latents that gives the prior mean of conditioned rows, and log-variances of the residual
for conditioned and unconditioned rows, one per latent dimension (with ModelConfig.skip_local, bounded bin
by bin by the observation's power in the linear gain of conditioned rows). They live in the model's weights
(`skip.*`), are learned with it, and are applied outside the engines, once per branch, by the sampler
loop and the trainer: every engine computes only the raw network output."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..sampling.precondition import skip_velocity
from ..sampling.source import check_source, source_for


LOCAL_FLOOR = 1e-3  # the least residual variance skip_local gives a bin


def bounded_variance(ref: torch.Tensor, var: torch.Tensor, factor: float) -> torch.Tensor:
    """var, bin by bin at most factor times the power of ref (B, T, D) in the bin (its real and imaginary
    latents together; codec.py), never below LOCAL_FLOOR."""
    ref = ref.float()
    half = ref.shape[-1] // 2
    power = ref[..., :half].square() + ref[..., half:].square()
    return torch.minimum(var.expand(ref.shape), factor * torch.cat([power, power], -1) + LOCAL_FLOOR)


class ObsSkip(nn.Module):
    def __init__(self, dim: int, gain: float = 0.5, var_cond: float = 0.3, var_uncond: float = 0.6,
                 source: str = "noise", source_sigma: float = 1.0, local: float = 0.0):
        super().__init__()
        if local < 0:
            raise ValueError(f"skip_local {local}: 0 (off) or a positive factor")
        self.local = local  # ModelConfig.skip_local
        check_source(source, source_sigma)  # fails here, not mid-restoration
        self.source, self.source_sigma = source, source_sigma  # the path's start (ModelConfig.source)
        self.gain = nn.Parameter(torch.full((dim,), gain))
        self.logvar = nn.Parameter(torch.tensor([[math.log(var_cond)] * dim, [math.log(var_uncond)] * dim]))

    def velocity(self, raw: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float, obs: torch.Tensor,
                 use_cond: torch.Tensor | bool, anchor: tuple[torch.Tensor, float] | None = None) -> torch.Tensor:
        """Rows with use_cond (B,) (or a bool for all rows) take the observation as prior mean. The path's
        source is the same for every row: an unconditioned row of a bridge still starts from the observation.

        anchor (estimate (B, T, D), factor): for the conditioned rows the prior is the estimate instead, each
        bin's variance at most factor times its power (the sampler's first estimate, for its later steps:
        SamplerConfig.anchor; in training, TrainConfig.own_anchor). Unconditioned rows keep theirs."""
        gain, logvar = self.gain.float(), self.logvar.float()
        if isinstance(use_cond, bool):
            mean = gain * obs.float() if use_cond else torch.zeros((), device=x.device)
            var = logvar[0 if use_cond else 1].exp()
        else:
            c = use_cond.to(x.device)[:, None, None]
            mean = torch.where(c, gain * obs.float(), 0.0)
            var = torch.where(c, logvar[0].exp(), logvar[1].exp())
        local = None
        if anchor is not None and (not isinstance(use_cond, bool) or use_cond):
            estimate, factor = anchor
            local = bounded_variance(estimate, var, factor)
            if isinstance(use_cond, bool):
                mean = estimate.float()
            else:
                mean, local = torch.where(c, estimate.float(), mean), torch.where(c, local, var)
        elif self.local > 0 and (not isinstance(use_cond, bool) or use_cond):
            # the clean speech in a bin is rarely much louder than what was heard there: where the
            # observation is quiet, so is the answer
            local = bounded_variance(obs, var, self.local)
            if not isinstance(use_cond, bool):
                local = torch.where(c, local, var)
        return skip_velocity(raw, x, t, mean, var, source_for(self.source, self.source_sigma, obs), local)

    def bind(self, obs: torch.Tensor) -> "BoundSkip":
        return BoundSkip(self, obs)


class BoundSkip:
    """The skip for one batch of windows: turns an engine's raw branch outputs into velocities."""

    def __init__(self, skip: ObsSkip, obs: torch.Tensor, anchor: tuple[torch.Tensor, float] | None = None):
        self.skip, self.obs, self.anchor = skip, obs, anchor

    def anchored(self, estimate: torch.Tensor, factor: float) -> "BoundSkip":
        """The same skip with the prior of its conditioned branches moved to `estimate` (ObsSkip.velocity)."""
        return BoundSkip(self.skip, self.obs, (estimate, factor))

    def __call__(self, raws: tuple[torch.Tensor, ...], x: torch.Tensor, t: float) -> tuple[torch.Tensor, ...]:
        """(u, so, sot) on guided steps or (sot,) on unguided ones; only u goes without the observation."""
        obs = self.obs.to(x.device)
        anchor = None if self.anchor is None else (self.anchor[0].to(x.device), self.anchor[1])
        if len(raws) == 3:
            return (self.skip.velocity(raws[0], x, t, obs, False),
                    *(self.skip.velocity(r, x, t, obs, True, anchor) for r in raws[1:]))
        return tuple(self.skip.velocity(r, x, t, obs, True, anchor) for r in raws)
