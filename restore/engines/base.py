"""Plans: which engine runs which branch, how the sot MLPs are split, and where codec work runs.

| plan   | sot                                   | so, u                        | codec                    |
| ------ | ------------------------------------- | ---------------------------- | ------------------------ |
| cpu    | CPU, all branches batched             | (same batch)                 | CPU                      |
| cuda   | GPU (bf16), all branches batched      | (same batch)                 | GPU                      |
| split  | main device, MLPs split with the CPU  | chunk worker process (torch) | worker, declared idle    |
| apple  | MLX GPU, MLPs split with the CPU      | Core ML worker (Neural Eng.) | worker, declared idle    |

A plan is data; `build_engine` turns it into an engine. Every plan gives the same audio for the same
seed, within the tolerance of its arithmetic (tests/test_engines.py).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, replace

import torch

PLANS = ("auto", "cpu", "cuda", "split")


@dataclass(frozen=True)
class Plan:
    name: str
    device: str                     # torch device of the main engine
    dtype: torch.dtype              # compute dtype of the main engine's GEMMs
    worker: bool = False            # so/u and codec in the chunk worker process
    split: bool = False             # sot MLPs split with a second engine (the CPU)
    mlp_share: float | None = None  # share of each MLP on the second engine; None: sweep on first use
    batch_branches: bool = True     # the branches of a guided step in one forward (False: baseline for benchmarks)


def resolve_plan(name: str = "auto", device: str = "auto", mlp_share: float | None = None) -> Plan:
    """`auto` picks the fastest plan this machine supports."""
    if name not in PLANS:
        raise ValueError(f"unknown plan {name!r}; choose one of {', '.join(PLANS)}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} needs a CUDA GPU, and torch sees none")
    if name == "auto":
        name = "cuda" if device.startswith("cuda") else "cpu"
    if name == "cuda":
        if not device.startswith("cuda"):
            raise ValueError("plan 'cuda' needs a CUDA device (--device cuda)")
        return Plan("cuda", device, torch.bfloat16)
    if name == "split":
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        return Plan("split", device, dtype, worker=True, split=True, mlp_share=mlp_share)
    if device != "cpu":
        raise ValueError(f"plan 'cpu' runs on the CPU, not {device!r}")
    return Plan("cpu", "cpu", torch.float32)


def build_engine(plan: Plan, model, codec, *, model_dir=None, frames: int = 0, samples: int = 0, tracer=None):
    """The engine that carries out `plan` for `model`."""
    from .torch_engine import TorchEngine

    if plan.worker:
        from .split_engine import SplitEngine
        return SplitEngine(model, codec, plan, model_dir, frames, samples, tracer)
    return TorchEngine(model, codec, plan, tracer, batch_branches=plan.batch_branches)


def machine() -> str:
    return f"{platform.system()} {platform.machine()}"


__all__ = ["PLANS", "Plan", "build_engine", "machine", "replace", "resolve_plan"]
