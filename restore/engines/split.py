"""Each MLP of the sot branch split between two engines along its intermediate dimension.

The main engine computes the first columns of the intermediate dimension (its GEMMs in its own dtype),
a second engine computes the rest concurrently in fp32, and the two partial down projections are
summed: exact in arithmetic. The share of the second engine is a dial: `sweep` measures where both
sides finish together, since two engines that share a power and memory budget do not run at their
standalone rates. Then the unsplit weights are dropped.

This module holds the split once: the rule (`split_point`), the shares to sweep (`SHARES`), the sweep,
and the torch kernel. The MLX kernel (restore/engines/mlx_branches.py) follows the same rule and names.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..model.layers import SwiGLU
from .trace import Tracer

# Shares of the second engine to try, by the main engine's kind. Next to a CUDA GPU the CPU is ~50x
# slower, so only a sliver pays; on an Apple GPU the best share measured on an M4 Pro was 0.3.
SHARES = {
    "cpu": (0.0, 0.25, 0.5),         # two shares of one CPU's cores (and MLX without a GPU)
    "cuda": (0.0, 0.02, 0.05, 0.1),
    "gpu": (0.0, 0.1, 0.2, 0.3, 0.4),  # MLX on an Apple GPU, the CPU as second engine
}


def split_point(intermediate: int, share: float) -> int:
    """Columns [0, k) run on the main engine, [k, intermediate) on the second one."""
    return intermediate - int(round(share * intermediate))


def sweep(resplit: Callable[[float], None], forward: Callable[[], None], shares: Sequence[float],
          repeats: int = 2, sync: Callable[[], None] = lambda: None, tracer: Tracer | None = None
          ) -> tuple[float, dict[float, float]]:
    """Split at each share (`resplit`) and time `forward` (one sot forward pass on the real window
    shape; `sync` waits for an asynchronous device); split at the fastest. Returns (share, seconds
    per share). The caller drops the unsplit weights it kept for `resplit`. Each share is a phase of
    `tracer` (what the progress display shows meanwhile)."""
    tracer = tracer or Tracer(enabled=False)
    times: dict[float, float] = {}
    for i, share in enumerate(shares):
        with tracer.phase(f"measuring how to split each MLP between two engines: share {share:g} "
                          f"({i + 1} of {len(shares)})"):
            resplit(share)
            forward()  # warm-up: allocations, first-call costs, compilation
            best = float("inf")
            for _ in range(repeats):
                sync()
                t0 = time.perf_counter()
                forward()
                sync()
                best = min(best, time.perf_counter() - t0)
        times[share] = best
    chosen = min(times, key=times.get)
    resplit(chosen)
    return chosen, times


class SecondEngine:
    """A second engine for torch: one thread that runs submitted work on `device` (the CPU's cores next
    to a GPU, or a second share of a CPU's cores). torch releases the GIL inside its kernels."""

    def __init__(self, device: str = "cpu", tracer: Tracer | None = None):
        self.device = torch.device(device)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore-second")
        self.tracer = tracer or Tracer(enabled=False)

    def submit(self, name: str, fn: Callable, *args):
        def run():
            with torch.inference_mode(), self.tracer.span(name, "second engine"):
                return fn(*args)
        return self.pool.submit(run)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class SplitSwiGLU(nn.Module):
    """SwiGLU with intermediate columns [0, k) on the main engine and [k, I) on the second engine."""

    def __init__(self, mlp: SwiGLU, share: float, main_device, main_dtype, second: SecondEngine):
        super().__init__()
        inter = mlp.gate_proj.weight.shape[0]
        k = split_point(inter, share)
        self.share, self.second = (inter - k) / inter, second
        w = lambda t, dev, dt: nn.Parameter(t.detach().to(dev, dt).clone(), requires_grad=False)
        self.gate_m = w(mlp.gate_proj.weight[:k], main_device, main_dtype)
        self.up_m = w(mlp.up_proj.weight[:k], main_device, main_dtype)
        self.down_m = w(mlp.down_proj.weight[:, :k], main_device, main_dtype)
        sd = second.device
        self.gate_s = w(mlp.gate_proj.weight[k:], sd, torch.float32)
        self.up_s = w(mlp.up_proj.weight[k:], sd, torch.float32)
        self.down_s = w(mlp.down_proj.weight[:, k:], sd, torch.float32)

    @staticmethod
    def _part(x, gate, up, down):
        return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C)."""
        future = None
        if self.gate_s.shape[0]:
            xs = x.to(self.second.device, torch.float32)  # a GPU->CPU copy on GPU plans
            future = self.second.submit("mlp share", self._part, xs, self.gate_s, self.up_s, self.down_s)
        out = self._part(x, self.gate_m, self.up_m, self.down_m) if self.gate_m.shape[0] else torch.zeros_like(x)
        if future is not None:
            out = out + future.result().to(out.device, out.dtype)
        return out


def split_model(model, share: float, main_device, main_dtype, second: SecondEngine,
                originals: Sequence[SwiGLU] | None = None) -> list[SwiGLU]:
    """Replace every block's MLP of a torch DiT by a split copy; returns the unsplit MLPs (for
    re-splitting in a sweep; drop them afterwards so their weights are freed)."""
    originals = list(originals) if originals is not None else [blk.mlp for blk in model.blocks]
    for blk, mlp in zip(model.blocks, originals):
        blk.mlp = SplitSwiGLU(mlp, share, main_device, main_dtype, second)
    return originals
