"""The PyTorch engine: all branches of a guided step batched into one forward pass (plans `cpu` and
`cuda`); unguided steps run the sot rows alone. Codec work runs at once on the same device."""

from __future__ import annotations

import torch

from .. import text as text_mod
from ..model.dit import DiT
from .base import Plan
from .trace import Tracer


class Done:
    """A codec job that already ran: its result is at hand."""

    def __init__(self, value: torch.Tensor):
        self.value = value


class TorchEngine:
    def __init__(self, model: DiT, codec, plan: Plan, tracer: Tracer | None = None, batch_branches: bool = True,
                 compile: str | None = None):
        self.model, self.codec, self.plan = model, codec, plan
        # Static window shapes: a compiled forward (and its CUDA graphs) is built once per row count.
        self.forward = torch.compile(model.velocity, mode=compile, dynamic=False) if compile else model.velocity
        self.copy_out = compile is not None  # CUDA-graph outputs are overwritten by the next replay
        self.batch_branches = batch_branches  # False: one forward per branch (the baseline batching beats)
        self.device = torch.device(plan.device)
        self.tracer = tracer or Tracer(enabled=False)
        self.ctx = self.ctx_sot = None
        self.rows = 0
        self.warnings: list[str] = []

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.plan.dtype, enabled=self.plan.dtype != torch.float32)

    # ---- codec: handles, so that plans with a worker can run it in idle time ----
    @torch.inference_mode()
    def encode_async(self, wave: torch.Tensor, urgent: bool = False):
        """wave (rows, N) -> a handle for its latents (rows, T, D)."""
        with self.tracer.span("encode", "main"):
            return Done(self.codec.encode(wave.to(self.device)))

    @torch.inference_mode()
    def decode_async(self, latents: torch.Tensor):
        """latents (rows, T, D) -> a handle for the audio (rows, N)."""
        with self.tracer.span("decode", "main"):
            return Done(self.codec.decode(latents.to(self.device)))

    def result(self, handle) -> torch.Tensor:
        return handle.value

    def idle(self) -> None:
        """The main process declares the second engine idle (nothing to do for an engine of one)."""

    def close(self) -> None:
        pass

    def _out(self, v: torch.Tensor) -> torch.Tensor:
        return v.to(torch.float32, copy=self.copy_out)

    # ---- branches ----
    @torch.inference_mode()
    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None]) -> None:
        """degraded (B, N) level-normalised audio, obs (B, T, D) its latents, one transcript per row."""
        ids, mask = text_mod.batch(texts, self.model.config.text.max_tokens, self.device)
        with self._autocast(), self.tracer.span("conditions", "main"):
            self.ctx = self.model.branch_context(degraded.to(self.device), obs.to(self.device), ids, mask)
        self.rows = obs.shape[0]
        self.ctx_sot = self.ctx.rows(slice(2 * self.rows, 3 * self.rows))

    @torch.inference_mode()
    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]:
        """x (B, T, D) -> (v_u, v_so, v_sot) on guided steps, (v_sot,) on unguided ones."""
        x = x.to(self.device)
        with self._autocast():
            if guided and not self.batch_branches:
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
