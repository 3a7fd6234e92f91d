"""Plans: which engine runs which branch, how the sot MLPs are split, and where codec work runs.

| plan   | sot                                   | so, u                        | codec                    |
| ------ | ------------------------------------- | ---------------------------- | ------------------------ |
| cpu    | CPU, branch after branch (measured)   | (same engine)                | CPU                      |
| cuda   | GPU (bf16), all branches batched      | (same batch)                 | GPU                      |
| split  | main device, MLPs split with the CPU  | chunk worker process (torch) | worker, declared idle    |
| apple  | MLX GPU, MLPs split with the CPU      | Core ML worker (Neural Eng.) | worker, declared idle    |

A plan is data, chosen per machine and request; `restore.engines.factory.build_engine` turns it into an
engine. Every plan gives the same audio for the same seed, within the tolerance of its arithmetic
(tests/test_engines.py, tests/test_mlx.py). This module imports no engine.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
from dataclasses import dataclass, replace
from numbers import Real

import torch

from ..errors import option

PLANS = ("auto", "cpu", "cuda", "split", "apple")


@dataclass(frozen=True)
class Plan:
    name: str
    device: str                     # torch device of the main engine
    dtype: torch.dtype              # compute dtype of the main engine's GEMMs
    worker: bool = False            # so/u and codec in the chunk worker process
    split: bool = False             # sot MLPs split with a second engine (the CPU)
    mlp_share: float | None = None  # share of each MLP on the second engine; None: sweep on first use
    batch_branches: bool = True     # the branches of a guided step in one forward (False: baseline for benchmarks)
    compile: str | None = None      # torch.compile mode for the main engine's forward ("reduce-overhead": CUDA graphs)
    engine: str = "torch"           # main engine: "torch" or "mlx"
    worker_backend: str = "torch"   # the worker's chunks: "torch" (CPU) or "coreml" (Neural Engine, macOS)
    noise_threads: int = 0          # threads drawing the sampler's noise a step ahead (0: inline; restore/pipeline/noise.py)
    read_threads: int = 1           # threads opening and reading short files ahead of the engine (restore/pipeline/restorer.py)


def apple_silicon() -> bool:
    """An Apple Silicon Mac with MLX installed: where `auto` picks the apple plan."""
    return platform.system() == "Darwin" and platform.machine() == "arm64" and _importable("mlx.core")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


def apple_engines() -> list[str]:
    """The engines of the apple plan this machine has: MLX on a GPU (Metal on a Mac), Core ML (macOS with
    coremltools, for the Neural Engine)."""
    found = []
    if _importable("mlx.core"):
        import mlx.core as mx
        if mx.is_available(mx.gpu):
            found.append("MLX on the GPU")
    if platform.system() == "Darwin" and _importable("coremltools"):
        found.append("Core ML")
    return found


def _apple_plan(mlp_share: float | None, worker_backend: str | None) -> Plan:
    if worker_backend is None and not apple_engines():
        # Both engines would be CPU stand-ins: slower than the cpu plan by far, and its first window
        # sweeps the MLP split on the CPU for many minutes. Tests name a worker backend to run it so.
        raise ValueError(f"{option('plan', 'apple')} needs an Apple Silicon Mac (MLX on its GPU, Core ML on its "
                         f"Neural Engine) and this machine has neither; use {option('plan', 'auto')}")
    if not _importable("mlx.core"):
        raise ValueError(f"{option('plan', 'apple')} needs MLX (pip install 'restore[apple]')")
    import mlx.core as mx

    gpu = mx.is_available(mx.gpu)
    if worker_backend is None:  # Core ML predicts only on macOS; elsewhere the worker runs the same chunks in torch
        worker_backend = "coreml" if platform.system() == "Darwin" and _importable("coremltools") else "torch"
    if worker_backend not in ("torch", "coreml"):
        raise ValueError(f"unknown worker backend {worker_backend!r}; choose torch or coreml")
    # bf16 GEMMs on the GPU; without a GPU (mlx[cpu] on Linux) both MLP shares run fp32 on CPU streams
    return Plan("apple", "cpu", torch.bfloat16 if gpu else torch.float32, worker=True, split=True,
                mlp_share=mlp_share, engine="mlx", worker_backend=worker_backend)


COMPILE_MODES = {"off": None, "default": "default", "cuda-graphs": "reduce-overhead"}


def resolve_plan(name: str = "auto", device: str = "auto", mlp_share: float | None = None,
                 worker_backend: str | None = None, compile: str = "off", cuda: bool | None = None) -> Plan:
    """`auto` picks the fastest plan this machine supports (`apple` on an Apple Silicon Mac with MLX,
    unless a device is named). `worker_backend` overrides the apple plan's worker (tests on Linux).
    `compile` (off, default, cuda-graphs) compiles the forward of the cpu and cuda plans. `mlp_share`
    (0-1) fixes the second engine's share of each MLP of the split and apple plans. The apple plan is
    refused where neither of its engines exists, unless a worker backend is named. `cuda`: whether the
    machine that will run the plan has a CUDA GPU (None: this one, as torch sees it)."""
    if mlp_share is not None and (isinstance(mlp_share, bool) or not isinstance(mlp_share, Real)
                                  or not 0.0 <= mlp_share <= 1.0):
        raise ValueError(f"{option('mlp_share')} must be a share between 0 and 1, got {mlp_share!r}")
    if compile not in COMPILE_MODES:
        raise ValueError(f"{option('compile')} must be one of {', '.join(COMPILE_MODES)}, got {compile!r}")
    plan = _resolve(name, device, mlp_share, worker_backend,
                    torch.cuda.is_available() if cuda is None else cuda)
    if compile == "off":
        return plan
    if plan.name not in ("cpu", "cuda"):
        raise ValueError(f"{option('compile')} applies to the cpu and cuda plans, not {plan.name!r}")
    if compile == "cuda-graphs" and plan.name != "cuda":
        raise ValueError(f"{option('compile', 'cuda-graphs')} needs the cuda plan")
    return replace(plan, compile=COMPILE_MODES[compile])


def gpu_noise_threads() -> int:
    """CPU threads for drawing noise while a GPU samples: most of the cores, which the GPU leaves idle,
    or RESTORE_NOISE_THREADS (0 draws inline). The cpu plan draws inline: its cores run the model."""
    given = os.environ.get("RESTORE_NOISE_THREADS")
    if given is not None:
        if not given.isdigit():
            raise ValueError(f"RESTORE_NOISE_THREADS must be a whole number of threads, got {given!r}")
        return int(given)
    return max(1, min(8, (os.cpu_count() or 2) - 2))


def gpu_read_threads() -> int:
    """CPU threads opening and reading a folder's short files while a GPU samples: a file costs several
    milliseconds of decoding, measuring and resampling, and a GPU restores a window of them in less, so
    one thread leaves it waiting. A quarter of the cores, 1 to 4. The cpu plan reads on one thread: its
    cores run the model."""
    return max(1, min(4, (os.cpu_count() or 2) // 4))


def _resolve(name: str, device: str, mlp_share: float | None, worker_backend: str | None, cuda: bool) -> Plan:
    if name not in PLANS:
        raise ValueError(f"{option('plan')} must be one of {', '.join(PLANS)}, got {name!r}")
    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ValueError(f"{option('device')} must be auto, cpu, cuda or cuda:N, got {device!r}")
    device_given = device != "auto"
    if device == "auto":
        device = "cuda" if cuda else "cpu"
    if device.startswith("cuda") and not cuda:
        raise ValueError(f"{option('device', device)} needs a CUDA GPU, and torch sees none")
    if name == "auto":
        name = "cuda" if device.startswith("cuda") else ("apple" if not device_given and apple_silicon() else "cpu")
    if name == "apple":
        if device != "cpu":
            raise ValueError(f"{option('plan', 'apple')} places its own engines (MLX, Core ML); it takes no "
                             f"{option('device', device)}")
        return _apple_plan(mlp_share, worker_backend)
    if name == "cuda":
        if not device.startswith("cuda"):
            raise ValueError(f"{option('plan', 'cuda')} needs a CUDA device ({option('device', 'cuda')})")
        return Plan("cuda", device, torch.bfloat16, noise_threads=gpu_noise_threads(), read_threads=gpu_read_threads())
    if name == "split":
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        return Plan("split", device, dtype, worker=True, split=True, mlp_share=mlp_share)
    if device != "cpu":
        raise ValueError(f"{option('plan', 'cpu')} runs on the CPU, not {option('device', device)}")
    # One forward per branch: on a 2-core CPU batching the three branches was no faster (flash 2.23x
    # against 2.37x realtime, pro 0.50x both, on an 8-layer model) and held 126-152 MB more.
    return Plan("cpu", "cpu", torch.float32, batch_branches=False)


__all__ = ["COMPILE_MODES", "PLANS", "Plan", "apple_engines", "apple_silicon", "gpu_noise_threads", "gpu_read_threads", "resolve_plan"]
