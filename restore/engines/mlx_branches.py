"""The guidance branches in MLX: the DiT on the GPU stream with each MLP split along its intermediate
dimension between the GPU (compute dtype, bf16) and a CPU stream (fp32); MLX evaluates the two streams
concurrently and the partial down projections are summed on the GPU stream. The split follows the rule,
shares and sweep of restore/engines/split.py.

On a Mac, main = GPU stream, second = CPU stream. Where MLX has no GPU (Linux with mlx[cpu]) both streams
are CPU streams, so the very same graph, split included, runs in CI for the parity tests.

Memory: unified memory removes copies between engines, not inside a program, so the unsplit MLP
weights are dropped once split copies exist, MLX's cache of freed buffers is bounded, and on macOS the
weights are wired so that the memory compressor leaves them alone.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch

from .. import text as text_mod
from .mlx_model import SwiGLU, linear, load
from .plan import Plan
from .split import SHARES, split_point, sweep
from .trace import Tracer

CACHE_LIMIT = 1 << 30  # bytes of freed buffers MLX may keep; unbounded, the cache grew to most of the RAM
DTYPES = {torch.float32: mx.float32, torch.bfloat16: mx.bfloat16, torch.float16: mx.float16}


def gpu_available() -> bool:
    return mx.is_available(mx.gpu)


def _own(w: mx.array, dtype) -> mx.array:
    """A copy with its own buffer: a slice is a view, and a view would keep the whole unsplit weight alive.
    (mx.contiguous is no help: a row slice is already contiguous, so it returns the view; tested.)"""
    return w.astype(dtype) if w.dtype != dtype else mx.array(w)


def _swiglu(x, gate, up, down):
    return (nn.silu(x @ gate.T) * (x @ up.T)) @ down.T


class SplitSwiGLU(nn.Module):
    """Intermediate columns [0, k) on the main stream in `dtype`, [k, I) on the second stream in fp32;
    the MLX kernel of restore.engines.split.SplitSwiGLU (same rule, same names gate_m ... down_s)."""

    def __init__(self, mlp: SwiGLU, share: float, dtype, main: mx.Stream, second: mx.Stream):
        super().__init__()
        inter = mlp.gate_proj.weight.shape[0]
        k = split_point(inter, share)
        self.share, self.dtype = (inter - k) / inter, dtype
        self._streams = (main, second)
        g, u, d = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight
        self.gate_m, self.up_m, self.down_m = _own(g[:k], dtype), _own(u[:k], dtype), _own(d[:, :k], dtype)
        f32 = mx.float32
        self.gate_s, self.up_s, self.down_s = _own(g[k:], f32), _own(u[k:], f32), _own(d[:, k:], f32)

    def __call__(self, x: mx.array) -> mx.array:
        """x (R, T, C) fp32 -> (R, T, C) fp32."""
        main, second = self._streams
        out = None
        if self.gate_s.shape[0]:
            with mx.stream(second):  # queued first so the CPU starts while the GPU takes its share
                out = _swiglu(x, self.gate_s, self.up_s, self.down_s)
        if self.gate_m.shape[0]:
            with mx.stream(main):
                part = _swiglu(x.astype(self.dtype), self.gate_m, self.up_m, self.down_m).astype(mx.float32)
                out = part if out is None else part + out
        return out


@dataclass
class WindowState:
    cond_h: mx.array   # (3B, T, C) rows u, so, sot; a window begun unguided: (B, T, C), the sot rows alone
    text: list         # per layer: (k, v, mask) of the sot rows' transcripts
    rows: int
    guided: bool = True

    @property
    def sot(self) -> mx.array:
        return self.cond_h[2 * self.rows:] if self.guided else self.cond_h


class MLXBranches:
    """All three branches in MLX, from the weights in the model folder (no torch copy of the network)."""

    masks = False  # its attention takes no mask (Engine.begin_window): files are not packed on this plan

    def __init__(self, plan: Plan, model_dir: str | Path, tracer: Tracer | None = None, *,
                 compile: bool | None = None, cache_limit: int = CACHE_LIMIT):
        self.plan = plan
        self.tracer = tracer or Tracer(enabled=False)
        self.warnings: list[str] = []
        gpu = gpu_available()
        self.main = mx.new_stream(mx.gpu if gpu else mx.cpu)
        self.second = mx.new_stream(mx.cpu)
        self.dtype = DTYPES[plan.dtype]
        mx.set_cache_limit(cache_limit)
        with mx.stream(self.main):
            self.mlx = load(model_dir)
            self._cast_trunk()
            null = self.mlx.null_text_state()
            self.null_out = [blk.cross.null_output(null) for blk in self.mlx.blocks]  # (C,) per layer
            mx.eval(self.null_out)
        self.share = plan.mlp_share
        self.swept: dict[float, float] = {}
        if self.share is not None:
            self.split(self.share)
        # mx.compile fuses the attention sub-layer's elementwise work around its GEMMs; on the CPU backend it
        # JIT-compiles C++ at first use, so it defaults to on only where there is a GPU
        self.compiled = gpu if compile is None else compile
        self._attention = [mx.compile(blk.attention, inputs=blk.attn.state) if self.compiled else blk.attention
                           for blk in self.mlx.blocks]
        self._wire(gpu)
        self.state: WindowState | None = None
        self.rows = 0

    # ---- weights and memory ----
    def _cast_trunk(self) -> None:
        """The trunk's attention GEMM weights to the compute dtype; MLPs stay fp32 until split (the CPU
        share must come from fp32, not from a bf16 rounding of it)."""
        if self.dtype == mx.float32:
            return
        for blk in self.mlx.blocks:
            for lin in (blk.attn.q_proj, blk.attn.k_proj, blk.attn.v_proj, blk.attn.o_proj,
                        blk.cross.q_proj, blk.cross.o_proj):
                lin.update({k: v.astype(self.dtype) for k, v in lin.parameters().items()})

    def split(self, share: float, originals: list | None = None) -> list:
        """Every block's MLP replaced by a split copy; returns the unsplit MLPs (the caller drops them)."""
        originals = originals if originals is not None else [blk.mlp for blk in self.mlx.blocks]
        for blk, mlp in zip(self.mlx.blocks, originals):
            blk.mlp = SplitSwiGLU(mlp, share, self.dtype, self.main, self.second)
        mx.eval([blk.mlp.parameters() for blk in self.mlx.blocks])
        self.share = share
        return originals

    def _wire(self, gpu: bool) -> None:
        """Keep the weights resident (macOS 15+, Metal only): a compressed weight page costs a stall."""
        if not (gpu and platform.system() == "Darwin"):
            return
        from mlx.utils import tree_flatten
        weights = sum(v.nbytes for _, v in tree_flatten(self.mlx.parameters()))
        limit = int(mx.device_info(mx.gpu).get("max_recommended_working_set_size", 0))
        try:
            if limit:  # the weights, plus room for one step's buffers
                mx.set_wired_limit(min(limit, 2 * weights + (1 << 30)))
        except (RuntimeError, ValueError) as e:  # e.g. above the system's limit (sysctl iogpu.wired_limit_mb)
            self.warnings.append(f"could not wire MLX's memory ({e}); the memory compressor may stall a step")

    def _sweep(self) -> None:
        """On the first window: the share at which both streams finish a sot forward pass together."""
        originals = [blk.mlp for blk in self.mlx.blocks]
        b = self.rows
        x = mx.random.normal(self.state.cond_h[:b].shape[:2] + (self.mlx.codec.latent_dim,), key=mx.random.key(0))
        forward = lambda: mx.eval(self._forward(x, 0.5, self.state.sot, 0))  # noqa: E731
        self.share, self.swept = sweep(lambda share: self.split(share, originals), forward,
                                       SHARES["gpu" if gpu_available() else "cpu"], tracer=self.tracer)
        del originals  # the unsplit fp32 weights go with the last reference

    def _require_guided(self) -> None:
        if not self.state.guided:
            raise RuntimeError("a guided step in a window begun unguided: begin_window(..., guided=True) builds "
                               "the u and so rows")

    def close(self) -> None:
        mx.clear_cache()

    # ---- branches ----
    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None],
                     groups: torch.Tensor | None = None, guided: bool = True) -> None:
        """degraded (B, N), obs (B, T, D) torch; conditions for all three branches in MLX, or only the sot
        rows' where no step of the window is guided (then the MLP share is not swept either)."""
        if groups is not None:
            raise ValueError("the MLX branches take no attention mask (masks is False)")
        m = self.mlx
        ids, mask = text_mod.batch(texts, m.config.text.max_tokens)
        with self.tracer.span("conditions", "main"), mx.stream(self.main):
            obs_m = mx.array(obs.float().cpu().numpy())
            sem = m.encoder(mx.array(degraded.float().cpu().numpy()))  # (B, T, S)
            cond = m.c_in(mx.concatenate([obs_m, sem], axis=-1))  # (B, T, C)
            if guided:
                cond = mx.concatenate([mx.broadcast_to(m.null_cond, cond.shape), cond, cond])
            text = m.text_encoder(mx.array(ids.numpy().astype(np.int32)), mx.array(mask.numpy()))
            mask_m = mx.array(mask.numpy())
            kv = [(*blk.cross.kv(text), mask_m) for blk in m.blocks]  # once per window, not per step
            self.state = WindowState(cond, kv, obs.shape[0], guided)
            mx.eval(self.state.cond_h, kv)
        self.rows = obs.shape[0]
        if guided and self.share is None:
            self._sweep()

    def so_conditions(self) -> np.ndarray:
        self._require_guided()
        b = self.rows
        return np.array(self.state.cond_h[b : 2 * b].astype(mx.float32), copy=True)

    def _forward(self, x: mx.array, t: float, cond_h: mx.array, free: int) -> mx.array:
        """x (R, T, D), cond_h (R, T, C); rows [0, free) text-free, the rest the sot rows -> (R, T, D)."""
        m = self.mlx
        with mx.stream(self.main):
            mod, fmod = m.modulation(mx.full((x.shape[0],), t, dtype=mx.float32))
            h = linear(m.x_in, x) + cond_h
            for i, blk in enumerate(m.blocks):
                h = blk(h, mod, free, self.null_out[i], self.state.text[i], attention=self._attention[i])
            return m.head(h, fmod)

    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]:
        """x (B, T, D) -> (v_u, v_so, v_sot) on guided steps, (v_sot,) on unguided ones (fp32 torch)."""
        b = self.rows
        xm = mx.array(x.float().cpu().numpy())
        name = "u+so+sot" if guided else "sot"
        if guided:
            self._require_guided()
        with self.tracer.span(name, "main"):
            if guided:
                v = self._forward(mx.concatenate([xm, xm, xm]), t, self.state.cond_h, 2 * b)
            else:
                v = self._forward(xm, t, self.state.sot, 0)
            out = torch.from_numpy(np.array(v.astype(mx.float32), copy=True))  # np.array evaluates
        return tuple(out.chunk(3)) if guided else (out,)
