"""The `split` plan: the heterogeneous machinery of the Apple plan, in torch, on any machine.

- sot runs on the main engine, each MLP split with a second engine (GPU + CPU threads, or two shares
  of the CPU's cores where there is no GPU);
- so and u run in the chunk worker process, concurrently with sot;
- codec work runs in the worker in idle time that this engine declares (unguided steps, between
  windows); the first window's encode runs at once.
If the worker dies or hangs, this engine computes every branch and codec job itself, with a warning.
"""

from __future__ import annotations

import numpy as np
import torch

from ..model.dit import DiT
from .base import Plan
from .split_mlp import SecondEngine, split_model, sweep
from .torch_engine import Done, TorchEngine
from .trace import Tracer
from .worker import WorkerClient, WorkerConfig, WorkerFailure

SWEEP_SHARES_CPU = (0.0, 0.25, 0.5)
SWEEP_SHARES_GPU = (0.0, 0.02, 0.05, 0.1)


class Pending:
    """A codec job queued in the worker, with its input kept for a local rerun if the worker fails."""

    def __init__(self, kind: str, job: int, data: torch.Tensor):
        self.kind, self.job, self.data = kind, job, data


class SplitEngine(TorchEngine):
    def __init__(self, model: DiT, codec, plan: Plan, model_dir: str, frames: int, samples: int,
                 tracer: Tracer | None = None, worker_threads: int = 1):
        super().__init__(model, codec, plan, tracer)
        self.model_dir, self.frames, self.samples = str(model_dir), frames, samples
        self.worker_threads = worker_threads
        self.second = SecondEngine("cpu", self.tracer)
        self.share = plan.mlp_share
        self.swept: dict[float, float] = {}
        if self.share is not None:
            split_model(self.model, self.share, plan.device, plan.dtype, self.second)
        self.worker: WorkerClient | None = None
        self.worker_rows = 0
        self.worker_failed = False

    # ---- worker lifecycle and failure ----
    def _ensure_worker(self, rows: int) -> None:
        if self.worker_failed or (self.worker is not None and self.worker.alive and self.worker_rows == rows):
            return
        if self.worker is not None:
            self.worker.close()
        cfg = self.model.config
        self.worker = WorkerClient(WorkerConfig(self.model_dir, rows, self.frames, self.samples, self.codec.latent_dim,
                                                cfg.width, threads=self.worker_threads), self.tracer)
        self.worker_rows = rows

    def _lost(self, e: WorkerFailure) -> None:
        if not self.worker_failed:
            self.warnings.append(f"the worker process failed ({e}); its branches and codec work ran in the main "
                                 "process instead")
        self.worker_failed = True
        if self.worker is not None:
            self.worker.close(kill=True)

    def _live(self) -> bool:
        return not self.worker_failed and self.worker is not None and self.worker.alive

    # ---- codec ----
    def encode_async(self, wave: torch.Tensor, urgent: bool = False):
        self._ensure_worker(wave.shape[0])
        if self._live():
            try:
                return Pending("encode", self.worker.submit("encode", wave.numpy(), urgent), wave)
            except WorkerFailure as e:
                self._lost(e)
        return super().encode_async(wave)

    def decode_async(self, latents: torch.Tensor):
        if self._live():
            try:
                return Pending("decode", self.worker.submit("decode", latents.cpu().float().numpy()), latents)
            except WorkerFailure as e:
                self._lost(e)
        return super().decode_async(latents)

    def result(self, handle) -> torch.Tensor:
        if isinstance(handle, Done):
            return handle.value
        if self._live():
            try:
                return torch.from_numpy(self.worker.result(handle.job)).to(self.device)
            except WorkerFailure as e:
                self._lost(e)
        local = super().encode_async if handle.kind == "encode" else super().decode_async
        return local(handle.data).value

    def idle(self) -> None:
        if self._live():
            try:
                self.worker.idle()
            except WorkerFailure as e:
                self._lost(e)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        self.second.close()

    # ---- branches ----
    @torch.inference_mode()
    def begin_window(self, degraded, obs, texts) -> None:
        super().begin_window(degraded, obs, texts)
        if self.share is None:  # first window: find the share where both engines finish together
            x = torch.randn(obs.shape, generator=torch.Generator().manual_seed(0)).to(self.device)
            tt = torch.full((self.rows,), 0.5, device=self.device)

            def forward():
                with self._autocast():
                    self.model.velocity(x, tt, self.ctx_sot)
            shares = SWEEP_SHARES_GPU if self.device.type == "cuda" else SWEEP_SHARES_CPU
            self.share, self.swept = sweep(self.model, forward, shares, self.plan.device, self.plan.dtype, self.second)
        self._ensure_worker(self.rows)
        if self._live():
            try:
                so = self.ctx.cond_h[self.rows : 2 * self.rows]
                self.worker.window(so.float().cpu().numpy())
            except WorkerFailure as e:
                self._lost(e)

    @torch.inference_mode()
    def velocities(self, x: torch.Tensor, t: float, guided: bool):
        if not guided:
            self.idle()  # the worker has no branch to run: its codec queue may use the time
            return super().velocities(x, t, False)
        if not self._live():
            return super().velocities(x, t, True)
        try:
            self.worker.step_begin(x.float().cpu().numpy(), t)
        except WorkerFailure as e:
            self._lost(e)
            return super().velocities(x, t, True)
        (v_sot,) = super().velocities(x, t, False)
        try:
            v_so, v_u = self.worker.step_end()
        except WorkerFailure as e:
            self._lost(e)
            return super().velocities(x, t, True)
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
        return to(v_u), to(v_so), v_sot
