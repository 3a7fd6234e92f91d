"""The PyTorch engine: all branches of a guided step batched into one forward pass (plans `cpu` and
`cuda`); unguided steps run the sot rows alone."""

from __future__ import annotations

import torch

from .. import text as text_mod
from ..model.dit import DiT
from .base import Plan


class TorchEngine:
    def __init__(self, model: DiT, plan: Plan):
        self.model, self.plan = model, plan
        self.device = torch.device(plan.device)
        self.ctx = self.ctx_sot = None
        self.rows = 0

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.plan.dtype,
                              enabled=self.plan.dtype != torch.float32)

    @torch.inference_mode()
    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None]) -> None:
        """degraded (B, N) level-normalised audio, obs (B, T, D) its latents, one transcript per row."""
        ids, mask = text_mod.batch(texts, self.model.config.text.max_tokens, self.device)
        with self._autocast():
            self.ctx = self.model.branch_context(degraded.to(self.device), obs.to(self.device), ids, mask)
        self.rows = obs.shape[0]
        self.ctx_sot = self.ctx.rows(slice(2 * self.rows, 3 * self.rows))

    @torch.inference_mode()
    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]:
        x = x.to(self.device)
        with self._autocast():
            if guided:
                tt = torch.full((3 * self.rows,), t, device=self.device)
                v = self.model.velocity(x.repeat(3, 1, 1), tt, self.ctx).float()
                return tuple(v.chunk(3))
            tt = torch.full((self.rows,), t, device=self.device)
            return (self.model.velocity(x, tt, self.ctx_sot).float(),)
