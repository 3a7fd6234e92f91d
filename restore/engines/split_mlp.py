"""Each MLP of the sot branch split between two engines along its intermediate dimension.

The main engine computes a share of the intermediate columns (its GEMMs in its own dtype), a second
engine computes the rest concurrently in fp32, and the two partial down projections are summed:
exact in arithmetic. The share is a dial; `sweep` measures where both sides finish together (the
rates of two engines that share a power and memory budget are not their standalone rates, so it is
measured, not computed), then the unsplit weights are dropped.
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


class SecondEngine:
    """A second engine: one thread that runs submitted work on `device` (the CPU's cores next to a
    GPU, or a second share of a CPU's cores). torch releases the GIL inside its kernels."""

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
        k = inter - int(round(share * inter))
        self.share, self.second = (inter - k) / inter, second
        self.main_dtype = main_dtype
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
        future = None
        if self.gate_s.shape[0]:
            xs = x.to(self.second.device, torch.float32)  # (B, T, C); a GPU->CPU copy on GPU plans
            future = self.second.submit("mlp share", self._part, xs, self.gate_s, self.up_s, self.down_s)
        out = self._part(x, self.gate_m, self.up_m, self.down_m) if self.gate_m.shape[0] else torch.zeros_like(x)
        if future is not None:
            out = out + future.result().to(out.device, out.dtype)
        return out


def split_model(model, share: float, main_device, main_dtype, second: SecondEngine,
                originals: Sequence[SwiGLU] | None = None) -> list[SwiGLU]:
    """Replace every block's MLP by a split copy; returns the unsplit MLPs (for re-splitting in a
    sweep; drop them afterwards so their weights are freed)."""
    originals = list(originals) if originals is not None else [blk.mlp for blk in model.blocks]
    for blk, mlp in zip(model.blocks, originals):
        blk.mlp = SplitSwiGLU(mlp, share, main_device, main_dtype, second)
    return originals


def sweep(model, forward: Callable[[], None], shares: Sequence[float], main_device, main_dtype,
          second: SecondEngine, repeats: int = 2) -> tuple[float, dict[float, float]]:
    """Time `forward` (one sot forward pass on the real window shape) at each share; keep the fastest
    split and drop the unsplit weights. Returns (best share, seconds per share)."""
    originals = [blk.mlp for blk in model.blocks]
    times: dict[float, float] = {}
    for share in shares:
        split_model(model, share, main_device, main_dtype, second, originals)
        forward()  # warm-up: allocations, first-call costs
        best = float("inf")
        for _ in range(repeats):
            if torch.device(main_device).type == "cuda":
                torch.cuda.synchronize(main_device)
            t0 = time.perf_counter()
            forward()
            if torch.device(main_device).type == "cuda":
                torch.cuda.synchronize(main_device)
            best = min(best, time.perf_counter() - t0)
        times[share] = best
    chosen = min(times, key=times.get)
    split_model(model, chosen, main_device, main_dtype, second, originals)
    del originals  # the unsplit weights go with the last reference
    return chosen, times
