"""The text-free branches (so, u) as fixed-shape chunks of consecutive layers.

What makes them a good fit for a second engine (a worker process here, the Neural Engine on a Mac):
- A text-free branch attends to the null token alone, so each layer's cross-attention is a constant
  vector, precomputed once (`cross_consts`). so and u are then the same graph: they differ only in
  the condition vector added before the first layer, computed outside the chunks.
- Each MLP is partitioned along its intermediate dimension into independent blocks whose down
  projections are summed: exact in arithmetic, and on the Neural Engine each block's weights and
  activations fit its on-chip memory.
- fp16 guards, each exact in fp32: RMSNorm rows are divided by their max-abs before squaring;
  attention queries carry an extra 1/1024 and each score row has its max subtracted before the
  scores are scaled back for the softmax; the SiLU's sigmoid is written 1/(1 + exp(-x)).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..model.dit import DiT
from ..model.layers import apply_rotary

QUERY_GUARD = 1.0 / 1024.0


def guarded_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without affine weight, safe in fp16: x / sqrt(mean(x^2) + eps) computed on x / max|x|."""
    m = x.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    y = x / m
    return y * torch.rsqrt(y.square().mean(-1, keepdim=True) + eps / (m * m))


def guarded_attention(q, k, v, scale: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v with the queries pre-scaled by 1/1024 and the row max subtracted;
    `mask` (B, 1, T, T) additive (model.layers.group_mask) or None."""
    s = (q * (scale * QUERY_GUARD)) @ k.transpose(-1, -2)  # (B, H, T, T), 1024x smaller than the scores
    if mask is not None:  # every query keeps a key of its own: the row max stays finite
        s = s + mask * QUERY_GUARD
    s = s - s.amax(-1, keepdim=True)
    return torch.softmax(s * (1.0 / QUERY_GUARD), dim=-1) @ v


def guarded_silu(x: torch.Tensor) -> torch.Tensor:
    return x * (1.0 / (1.0 + torch.exp(-x)))


class PartitionedMLP(nn.Module):
    """SwiGLU MLP whose intermediate columns are split into `blocks` independent blocks."""

    def __init__(self, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor, blocks: int, guard: bool):
        super().__init__()
        inter = gate.shape[0]
        bounds = [round(i * inter / blocks) for i in range(blocks + 1)]
        self.guard = guard
        self.gate = nn.ParameterList(nn.Parameter(gate[a:b].clone(), requires_grad=False) for a, b in zip(bounds, bounds[1:]))
        self.up = nn.ParameterList(nn.Parameter(up[a:b].clone(), requires_grad=False) for a, b in zip(bounds, bounds[1:]))
        self.down = nn.ParameterList(nn.Parameter(down[:, a:b].clone(), requires_grad=False) for a, b in zip(bounds, bounds[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = guarded_silu if self.guard else F.silu
        out = None
        for g, u, d in zip(self.gate, self.up, self.down):
            part = F.linear(act(F.linear(x, g)) * F.linear(x, u), d)
            out = part if out is None else out + part
        return out


class ChunkLayer(nn.Module):
    """One text-free layer: self-attention + constant cross-attention + partitioned MLP."""

    def __init__(self, block, heads: int, eps: float, mlp_blocks: int, guard: bool):
        super().__init__()
        a = block.attn
        self.heads, self.head_dim, self.eps, self.guard = heads, a.head_dim, eps, guard
        self.qkv_w = nn.Parameter(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach().clone(), requires_grad=False)
        self.qkv_b = nn.Parameter(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]).detach().clone(), requires_grad=False)
        self.o_w = nn.Parameter(a.o_proj.weight.detach().clone(), requires_grad=False)
        m = block.mlp
        self.mlp = PartitionedMLP(m.gate_proj.weight.detach(), m.up_proj.weight.detach(), m.down_proj.weight.detach(),
                                  mlp_blocks, guard)

    def norm(self, x):
        if self.guard:
            return guarded_rms(x, self.eps)
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps)

    def forward(self, h, mod, cross, cos, sin, mask=None):
        """h (B, T, C); mod (B, 6, C) this layer's modulation; cross (C,) the null-token constant; mask
        the self-attention's (model.layers.group_mask) or None."""
        b, t, c = h.shape
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = mod.unbind(1)
        x = self.norm(h) * (1 + scale_a[:, None]) + shift_a[:, None]
        q, k, v = F.linear(x, self.qkv_w, self.qkv_b).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        scale = 1.0 / math.sqrt(self.head_dim)
        y = guarded_attention(q, k, v, scale, mask) if self.guard else F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h = h + gate_a[:, None] * F.linear(y.transpose(1, 2).reshape(b, t, c), self.o_w)
        h = h + cross
        x = self.norm(h) * (1 + scale_m[:, None]) + shift_m[:, None]
        return h + gate_m[:, None] * self.mlp(x)


class Chunk(nn.Module):
    """Consecutive layers run as one fixed-shape program."""

    def __init__(self, layers: list[ChunkLayer]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, h, mods, crosses, cos, sin, mask=None):
        """h (B, T, C); mods (B, L, 6, C) for this chunk's L layers; crosses (L, C); mask (B, 1, T, T)
        or None."""
        for i, layer in enumerate(self.layers):
            h = layer(h, mods[:, i], crosses[i], cos, sin, mask)
        return h


class TextFreeBranches(nn.Module):
    """so and u for one window, as chunks: everything a worker needs, nothing more.

    The pieces around the chunks (input projection, timestep modulation, output head) are small and
    kept here in plain torch; the chunks are what a Core ML backend replaces."""

    def __init__(self, model: DiT, layers_per_chunk: int = 4, mlp_blocks: int = 2, guard: bool = True):
        super().__init__()
        cfg = model.config
        self.x_in, self.time_mlp, self.mod = model.x_in, model.time_mlp, model.mod
        self.final_norm, self.final_mod, self.out = model.final_norm, model.final_mod, model.out
        self.null_cond = model.null_cond
        self.time_dim, self.head_dim, self.rope_theta = cfg.time_dim, cfg.head_dim, cfg.rope_theta
        self.register_buffer("ada", torch.stack([blk.ada.detach() for blk in model.blocks]))  # (layers, 6, C)
        with torch.no_grad():
            null = model.null_text_state()
            self.register_buffer("crosses", torch.stack([blk.cross.null_output(null) for blk in model.blocks]))
        layers = [ChunkLayer(blk, cfg.heads, cfg.norm_eps, mlp_blocks, guard) for blk in model.blocks]
        self.bounds = list(range(0, len(layers), layers_per_chunk)) + [len(layers)]
        self.chunks = nn.ModuleList(Chunk(layers[a:b]) for a, b in zip(self.bounds, self.bounds[1:]))

    def modulation(self, t: torch.Tensor):
        from ..model.encoder import timestep_features
        temb = F.silu(self.time_mlp(timestep_features(t, self.time_dim)))
        b, c = temb.shape
        mods = self.mod(temb).view(b, 1, 6, c) + self.ada[None]  # (B, layers, 6, C)
        return mods, self.final_mod(temb).view(b, 2, c)

    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond_h: torch.Tensor, cos, sin, mask=None) -> torch.Tensor:
        """x (B, T, D), t (B,), cond_h (B, T, C) (the so conditions, or the null vector for u); mask the
        self-attention's (model.layers.group_mask) or None."""
        mods, fmod = self.modulation(t)
        h = self.x_in(x) + cond_h
        for (a, b), chunk in zip(zip(self.bounds, self.bounds[1:]), self.chunks):
            h = chunk(h, mods[:, a:b], self.crosses[a:b], cos, sin, mask)
        shift, scale = fmod.unbind(1)
        return self.out(self.final_norm(h) * (1 + scale[:, None]) + shift[:, None])
