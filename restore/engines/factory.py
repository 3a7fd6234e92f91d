"""From a plan to an engine: the one place that knows every engine (restore/engines/plan.py knows none).

| plan         | branches                     | engine                                         |
| ------------ | ---------------------------- | ---------------------------------------------- |
| cpu, cuda    | TorchBranches                | LocalEngine                                    |
| split        | TorchBranches, MLPs split    | WorkerEngine (torch chunks in the worker)      |
| apple        | MLXBranches, MLPs split      | WorkerEngine (Core ML chunks in the worker)    |
"""

from __future__ import annotations

from pathlib import Path

from .engine import Engine, LocalEngine
from .plan import Plan
from .torch_branches import TorchBranches
from .trace import Tracer
from .worker_engine import WorkerEngine


def build_engine(plan: Plan, model, codec, *, model_dir: str | Path | None = None, frames: int = 0,
                 samples: int = 0, tracer: Tracer | None = None) -> Engine:
    """The engine that carries out `plan` for `model` (a torch DiT; for MLX plans its configuration is
    enough, the weights are read from `model_dir`). `frames` and `samples` are the window's shape, which
    a worker's shared memory and compiled programs are made for."""
    tracer = tracer or Tracer(enabled=False)
    if plan.engine == "mlx":
        if model_dir is None:
            raise ValueError("the MLX engine loads its weights from the model folder: pass model_dir")
        from .mlx_branches import MLXBranches  # MLX is an optional dependency
        branches = MLXBranches(plan, model_dir, tracer)
    else:
        branches = TorchBranches(model, plan, tracer)
    local = LocalEngine(branches, codec, plan.device, tracer)
    if not plan.worker:
        return local
    return WorkerEngine(local, plan, model.config, codec.latent_dim, model_dir, frames, samples)
