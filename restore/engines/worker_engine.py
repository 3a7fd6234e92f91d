"""Plans `split` and `apple`: a local engine for the sot branch, a worker process for the rest.

- sot runs on the local engine's branches: torch with each MLP split with the CPU (`split`), or MLX
  on the GPU with each MLP split with a CPU stream (`apple`);
- so and u run in the chunk worker process (restore/engines/worker.py), concurrently with sot: as the
  same chunks in torch on the CPU, or as Core ML programs on the Neural Engine (worker backend
  `coreml`, macOS);
- codec work runs in the worker in idle time this engine declares (unguided steps, between windows);
  the first window's encode runs at once, in this process;
- the worker starts with the first window that has a guided step: a sampler whose steps are all
  unguided runs on the local engine alone, with no worker process and no sweep of the MLP share;
- if the worker dies or hangs, the local engine computes every branch and codec job, with a warning.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..config import ModelConfig
from .engine import Done, LocalEngine
from .plan import Plan
from .worker import WorkerClient, WorkerConfig, WorkerFailure

COREML_START_TIMEOUT = 1800.0  # a Core ML worker converts (first use only) and compiles before "ready"


class Pending:
    """A codec job queued in the worker, with its input kept for a local rerun if the worker fails."""

    def __init__(self, kind: str, job: int, data: torch.Tensor):
        self.kind, self.job, self.data = kind, job, data


class WorkerEngine:
    def __init__(self, local: LocalEngine, plan: Plan, model: ModelConfig, latent_dim: int,
                 model_dir: str | Path, frames: int, samples: int, worker_threads: int = 1):
        self.local, self.plan = local, plan
        self.model_config, self.latent_dim = model, latent_dim
        self.model_dir, self.frames, self.samples = str(model_dir), frames, samples
        self.worker_threads = worker_threads
        self.device = local.device
        self.tracer = local.tracer
        self.warnings = local.warnings
        self.worker: WorkerClient | None = None
        self.worker_rows = 0
        self.worker_failed = False
        # the apple plan without Core ML (Linux, or coremltools missing): say so once, in the first report
        self.note = ("the so/u branches run in a torch worker on the CPU, not on the Neural Engine (Core ML "
                     "predicts only on macOS with coremltools installed)"
                     if plan.name == "apple" and plan.worker_backend != "coreml" else None)

    # ---- worker lifecycle and failure ----
    def _worker_config(self, rows: int) -> WorkerConfig:
        cfg = self.model_config
        extra = {}
        if self.plan.worker_backend == "coreml":  # MLP blocks sized for the Neural Engine's on-chip memory
            from .coreml_export import mlp_blocks_for  # sized for one row: one export serves mono and stereo
            extra["mlp_blocks"] = mlp_blocks_for(cfg.width, cfg.intermediate, self.frames)
        return WorkerConfig(self.model_dir, rows, self.frames, self.samples, self.latent_dim, cfg.width,
                            threads=self.worker_threads, backend=self.plan.worker_backend, **extra)

    def _ensure_worker(self, rows: int) -> None:
        if self.worker_failed or (self.worker is not None and self.worker.alive and self.worker_rows == rows):
            return
        if self.worker is not None:
            self.worker.close()
        wait = {"start_timeout": COREML_START_TIMEOUT} if self.plan.worker_backend == "coreml" else {}
        self.worker = WorkerClient(self._worker_config(rows), self.tracer, **wait)
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
        if self.worker is not None:  # started by a guided window; sized anew for a batch of other rows
            self._ensure_worker(wave.shape[0])
        if self._live():
            try:
                return Pending("encode", self.worker.submit("encode", wave.numpy(), urgent), wave)
            except WorkerFailure as e:
                self._lost(e)
        return self.local.encode_async(wave)

    def decode_async(self, latents: torch.Tensor):
        if self._live():
            try:
                return Pending("decode", self.worker.submit("decode", latents.cpu().float().numpy()), latents)
            except WorkerFailure as e:
                self._lost(e)
        return self.local.decode_async(latents)

    def result(self, handle: Done | Pending) -> torch.Tensor:
        if isinstance(handle, Done):
            return handle.value
        if self._live():
            try:
                return torch.from_numpy(self.worker.result(handle.job)).to(self.device)
            except WorkerFailure as e:
                self._lost(e)
        rerun = self.local.encode_async if handle.kind == "encode" else self.local.decode_async
        return rerun(handle.data).value

    def idle(self) -> None:
        if self._live():
            try:
                self.worker.idle()
            except WorkerFailure as e:
                self._lost(e)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        self.local.close()

    # ---- branches ----
    @torch.inference_mode()
    @property
    def masks(self) -> bool:
        """Whether windows of several recordings can be restored apart (an attention mask: see
        Engine.masks): the Core ML programs take none."""
        return self.local.masks and self.plan.worker_backend != "coreml"

    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None],
                     groups: torch.Tensor | None = None, guided: bool = True) -> None:
        # the first guided window also sweeps the MLP share (the branches' begin_window)
        self.local.begin_window(degraded, obs, texts, groups, guided)
        if not guided:
            return
        if self.note is not None:
            self.warnings.append(self.note)
            self.note = None
        self._ensure_worker(obs.shape[0])
        if self._live():
            try:
                self.worker.window(self.local.branches.so_conditions(),
                                   None if groups is None else groups.cpu().numpy())
            except WorkerFailure as e:
                self._lost(e)

    @torch.inference_mode()
    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]:
        if not guided:
            self.idle()  # the worker has no branch to run: its codec queue may use the time
            return self.local.velocities(x, t, False)
        if not self._live():
            return self.local.velocities(x, t, True)
        try:
            self.worker.step_begin(x.float().cpu().numpy(), t)
        except WorkerFailure as e:
            self._lost(e)
            return self.local.velocities(x, t, True)
        (v_sot,) = self.local.velocities(x, t, False)
        try:
            v_so, v_u = self.worker.step_end()
        except WorkerFailure as e:
            self._lost(e)
            return self.local.velocities(x, t, True)
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(self.device)  # noqa: E731
        return to(v_u), to(v_so), v_sot
