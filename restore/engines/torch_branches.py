"""The guidance branches in torch. Plans `cpu` and `cuda` batch every branch of a guided step into one
forward pass (or, where batching does not pay, run one after another); unguided steps run the sot rows
alone. Plan `split` splits each MLP with a second engine (restore/engines/split.py)."""

from __future__ import annotations

import numpy as np
import torch

from .. import text as text_mod
from ..model.dit import DiT
from .plan import Plan
from .split import SHARES, SecondEngine, split_model, sweep
from .trace import Tracer


class TorchBranches:
    masks = True  # the model's self-attention takes a mask (model.layers.group_mask)

    def __init__(self, model: DiT, plan: Plan, tracer: Tracer | None = None):
        self.model, self.plan = model, plan
        self.device = torch.device(plan.device)
        self.tracer = tracer or Tracer(enabled=False)
        # Static window shapes: a compiled forward (and its CUDA graphs) is built once per row count.
        compile = plan.compile
        self.forward = self._compiled(torch.compile(model.velocity, mode=compile, dynamic=False)) if compile \
            else model.velocity
        self.copy_out = compile is not None  # CUDA-graph outputs are overwritten by the next replay
        self.ctx = self.ctx_sot = None
        self.rows = 0
        self.warnings: list[str] = []
        self.second = SecondEngine("cpu", self.tracer) if plan.split else None
        self.share = plan.mlp_share if plan.split else None
        self.swept: dict[float, float] = {}
        if self.second is not None and self.share is not None:
            split_model(model, self.share, plan.device, plan.dtype, self.second)

    def _compiled(self, forward):
        """`forward`, its first call for each batch shape (where it compiles) shown as a phase."""
        seen: set[int] = set()

        def run(x, t, ctx):
            if x.shape[0] in seen:
                return forward(x, t, ctx)
            seen.add(x.shape[0])
            with self.tracer.phase(f"compiling the model for batches of {x.shape[0]} (once per batch shape)"):
                return forward(x, t, ctx)
        return run

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.plan.dtype, enabled=self.plan.dtype != torch.float32)

    def _out(self, v: torch.Tensor) -> torch.Tensor:
        return v.to(torch.float32, copy=self.copy_out)

    @torch.inference_mode()
    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None],
                     groups: torch.Tensor | None = None, guided: bool = True) -> None:
        """degraded (B, N) level-normalised audio, obs (B, T, D) its latents, one transcript per row;
        groups (B, T) the recordings each window holds, or None; guided: whether any step of the window
        runs the three branches (Engine.begin_window). Unguided, only the sot rows' conditions are built
        and the MLP share is not swept: the sot rows run where the plan put them, unsplit if not yet split."""
        ids, mask = text_mod.batch(texts, self.model.config.text.max_tokens, self.device)
        degraded, obs = degraded.to(self.device), obs.to(self.device)
        groups = None if groups is None else groups.to(self.device)
        self.rows = obs.shape[0]
        with self._autocast(), self.tracer.span("conditions", "main"):
            if guided:
                self.ctx = self.model.branch_context(degraded, obs, ids, mask, groups)
                self.ctx_sot = self.ctx.rows(slice(2 * self.rows, 3 * self.rows))
            else:
                self.ctx = None
                sot = torch.ones(self.rows, dtype=torch.bool, device=self.device)
                self.ctx_sot = self.model.context(degraded, obs, sot, ids, mask, groups)
        if guided and self.second is not None and self.share is None:
            self._sweep(obs.shape)

    def _sweep(self, shape: torch.Size) -> None:
        """On the first window: the share at which both engines finish a sot forward pass together."""
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(self.device)
        tt = torch.full((self.rows,), 0.5, device=self.device)
        originals = [blk.mlp for blk in self.model.blocks]

        def forward():
            with self._autocast():
                self.model.velocity(x, tt, self.ctx_sot)

        def resplit(share):
            split_model(self.model, share, self.plan.device, self.plan.dtype, self.second, originals)

        cuda = self.device.type == "cuda"
        sync = (lambda: torch.cuda.synchronize(self.device)) if cuda else (lambda: None)
        self.share, self.swept = sweep(resplit, forward, SHARES["cuda" if cuda else "cpu"], sync=sync,
                                       tracer=self.tracer)
        del originals  # the unsplit weights go with the last reference

    def so_conditions(self) -> np.ndarray:
        self._require_guided()
        return self.ctx.cond_h[self.rows : 2 * self.rows].float().cpu().numpy()

    @torch.inference_mode()
    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]:
        """x (B, T, D) -> (v_u, v_so, v_sot) on guided steps, (v_sot,) on unguided ones."""
        x = x.to(self.device)
        if guided:
            self._require_guided()
        with self._autocast():
            if guided and not self.plan.batch_branches:
                tt = torch.full((self.rows,), t, device=self.device)
                out = []
                for i, name in enumerate(("u", "so", "sot")):
                    with self.tracer.span(name, "main"):
                        ctx = self.ctx.rows(slice(i * self.rows, (i + 1) * self.rows))
                        out.append(self._out(self.forward(x, tt, ctx)))
                return tuple(out)
            if guided:
                with self.tracer.span("u+so+sot", "main"):
                    tt = torch.full((3 * self.rows,), t, device=self.device)
                    v = self._out(self.forward(x.repeat(3, 1, 1), tt, self.ctx))
                return tuple(v.chunk(3))
            with self.tracer.span("sot", "main"):
                tt = torch.full((self.rows,), t, device=self.device)
                return (self._out(self.forward(x, tt, self.ctx_sot)),)

    def _require_guided(self) -> None:
        if self.ctx is None:
            raise RuntimeError("a guided step in a window begun unguided: begin_window(..., guided=True) builds "
                               "the u and so rows")

    def close(self) -> None:
        if self.second is not None:
            self.second.close()
