"""The `apple` plan: the split engine's machinery with MLX as the main engine.

- sot runs in MLX: GPU stream (bf16) with each MLP split with a CPU stream (fp32) (mlx_engine.py);
- so and u run in the chunk worker process, as Core ML chunks on the Neural Engine (coreml_runtime.py)
  on macOS, or as the same chunks in torch where Core ML cannot predict (Linux CI);
- codec work runs in the worker only in idle time this engine declares; the first encode at once;
- if the worker fails, every branch and codec job runs in this process, with a warning.

SplitEngine already does the worker, idle-time and fallback parts; it asks its parent class (super())
for anything it computes locally. `_MLXLocal` slots in as that parent, so SplitEngine's local work (sot,
and every branch after a worker failure) runs on the MLX engine with nothing copied:
MRO = AppleEngine -> SplitEngine -> _MLXLocal -> TorchEngine.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import torch

from .base import Plan
from .mlx_engine import MLXEngine
from .split_engine import SplitEngine
from .torch_engine import TorchEngine
from .trace import Tracer
from .worker import WorkerClient, WorkerConfig


class _MLXLocal(TorchEngine):
    """Local branch work on `self.mlx_engine`; codec work stays TorchEngine's (torch on the CPU)."""

    mlx_engine: MLXEngine

    def begin_window(self, degraded, obs, texts) -> None:
        eng = self.mlx_engine
        eng.begin_window(degraded, obs, texts)  # the first window also sweeps the MLP share
        self.rows, self.share, self.swept = eng.rows, eng.share, eng.swept
        # SplitEngine sends the so rows' conditions to the worker from ctx.cond_h (rows u, so, sot)
        self.ctx = SimpleNamespace(cond_h=torch.from_numpy(np.array(eng.state.cond_h, copy=True)))

    def velocities(self, x, t, guided):
        return self.mlx_engine.velocities(x, t, guided)


class AppleEngine(SplitEngine, _MLXLocal):
    def __init__(self, model, codec, plan: Plan, model_dir, frames: int, samples: int,
                 tracer: Tracer | None = None, worker_threads: int = 1):
        # SplitEngine splits the torch model's MLPs when the plan names a share; here the MLX engine splits
        # its own copy, so SplitEngine sees no share and the torch model stays untouched
        super().__init__(model, codec, replace(plan, mlp_share=None), model_dir, frames, samples, tracer,
                         worker_threads)
        self.plan = plan
        self.mlx_engine = MLXEngine(model, codec, plan, self.tracer, model_dir=model_dir)
        self.share, self.swept = self.mlx_engine.share, self.mlx_engine.swept
        self.told_backend = False

    def _ensure_worker(self, rows: int) -> None:
        """As SplitEngine's, with the plan's worker backend and, for Core ML, MLP blocks sized for the
        Neural Engine's on-chip memory."""
        if self.worker_failed or (self.worker is not None and self.worker.alive and self.worker_rows == rows):
            return
        if self.worker is not None:
            self.worker.close()
        cfg = self.model.config
        extra = {}
        if self.plan.worker_backend == "coreml":  # sized for one row, so one export serves mono and stereo
            from .coreml_export import mlp_blocks_for
            extra["mlp_blocks"] = mlp_blocks_for(cfg.width, cfg.intermediate, self.frames)
        config = WorkerConfig(self.model_dir, rows, self.frames, self.samples, self.codec.latent_dim, cfg.width,
                              threads=self.worker_threads, backend=self.plan.worker_backend, **extra)
        # a Core ML worker converts (first use only) and compiles its programs before it answers "ready"
        wait = {"start_timeout": 1800.0} if self.plan.worker_backend == "coreml" else {}
        self.worker = WorkerClient(config, self.tracer, **wait)
        self.worker_rows = rows

    def begin_window(self, degraded, obs, texts) -> None:
        if not self.told_backend and self.plan.worker_backend != "coreml":
            self.warnings.append("the so/u branches run in a torch worker on the CPU, not on the Neural Engine "
                                 "(Core ML predicts only on macOS with coremltools installed)")
        self.told_backend = True
        super().begin_window(degraded, obs, texts)

    def close(self) -> None:
        super().close()
        self.mlx_engine.close()
