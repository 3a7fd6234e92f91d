"""Transformer pieces of the Qwen2-style trunk: RMSNorm, rotary self-attention, cross-attention,
SwiGLU MLP, and the block that joins them under adaptive (timestep) modulation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6, affine: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            x = x * self.weight.float()
        return x.to(dtype)


def rotary_tables(positions: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables of shape (T, head_dim // 2)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    ang = torch.arange(positions, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, hd); rotate the two halves of each head (Qwen2 / Llama convention)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def group_mask(groups: torch.Tensor) -> torch.Tensor:
    """Frame groups (B, T) -> an additive self-attention mask (B, 1, T, T), fp32: a query frame attends to
    the key frames of its own group, and to those of group 0, never to another group's (-inf). Where
    several recordings share a window (restore/pipeline/windows.py) each one's frames are a group and
    the silence around them group 0: each recording attends to itself and to the silence, the silence to
    the silence alone, so that no recording reaches another, not even through the silence. The silence
    stands for the padding a recording would have alone: its keys count (T - own frames) / silent
    frames times each (a bias of the log of that), as if there were that much of it."""
    b, t = groups.shape
    onehot = torch.nn.functional.one_hot(groups, int(groups.max()) + 1).float()
    frames = onehot.sum(1)                                                    # (B, K)
    silence = frames[:, :1]
    weight = torch.where(silence > 0, (t - frames) / silence.clamp_min(1), 1.0).clamp_min(1e-6)
    weight[:, 0] = 1.0                                                        # the silence among itself
    bias = weight.log().gather(1, groups)                                     # (B, T): per query
    keys, queries = groups[:, None, None, :], groups[:, None, :, None]
    return torch.where(keys == queries, 0.0, torch.where(keys == 0, bias[:, None, :, None], float("-inf")))


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.q_proj = nn.Linear(width, width, bias=True)
        self.k_proj = nn.Linear(width, width, bias=True)
        self.v_proj = nn.Linear(width, width, bias=True)
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        """x (B, T, C); mask (B, 1, T, T) additive (`group_mask`) or None: every frame attends to every frame."""
        b, t, c = x.shape  # (B, T, C)
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.to(q.dtype))
        return self.o_proj(y.transpose(1, 2).reshape(b, t, c))


class CrossAttention(nn.Module):
    """Attention from audio frames to text states. Position 0 of the text is the learned null token,
    so a text-free branch (mask keeps position 0 only) gets a constant: o_proj(v_proj(null))."""

    def __init__(self, width: int, heads: int, text_width: int):
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.q_proj = nn.Linear(width, width, bias=True)
        self.k_proj = nn.Linear(text_width, width, bias=True)
        self.v_proj = nn.Linear(text_width, width, bias=True)
        self.o_proj = nn.Linear(width, width, bias=False)

    def kv(self, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, l, _ = text.shape  # (B, L, Wt)
        k = self.k_proj(text).view(b, l, self.heads, self.head_dim).transpose(1, 2)  # (B, H, L, hd)
        v = self.v_proj(text).view(b, l, self.heads, self.head_dim).transpose(1, 2)
        return k, v

    def null_output(self, null_state: torch.Tensor) -> torch.Tensor:
        """(Wt,) null text state -> (C,) the constant output of a text-free branch."""
        return self.o_proj(self.v_proj(null_state))

    def forward(self, x: torch.Tensor, text: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k, v = self.kv(text)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])  # mask (B, L) bool
        return self.o_proj(y.transpose(1, 2).reshape(b, t, c))


class SwiGLU(nn.Module):
    def __init__(self, width: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(width, intermediate, bias=False)
        self.up_proj = nn.Linear(width, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (B, T, C), shift/scale (B, C)."""
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


class Block(nn.Module):
    """Pre-norm Qwen2 block with adaLN: self-attention, cross-attention to text, SwiGLU MLP.

    `mod` (B, 6, C) holds shift/scale/gate for the self-attention and MLP sub-layers. The cross-attention
    sub-layer is unmodulated so that its text-free output is a per-layer constant.
    """

    def __init__(self, width: int, heads: int, intermediate: int, text_width: int, eps: float):
        super().__init__()
        self.attn_norm = RMSNorm(width, eps, affine=False)
        self.attn = SelfAttention(width, heads)
        self.cross_norm = RMSNorm(width, eps)
        self.cross = CrossAttention(width, heads, text_width)
        self.mlp_norm = RMSNorm(width, eps, affine=False)
        self.mlp = SwiGLU(width, intermediate)
        self.ada = nn.Parameter(torch.zeros(6, width))  # per-layer offset to the shared modulation

    def forward(self, x, mod, cos, sin, text, text_mask, free: int = 0, mask=None):
        """x (B, T, C); mod (B, 6, C); text (B, L, Wt) + text_mask (B, L). The first `free` rows are
        text-free: they attend to the null token alone, so their cross-attention is the constant
        o_proj(v_proj(null state)), added without computing queries, attention or the projection.
        `mask`: the self-attention's (`group_mask`), or None."""
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = (mod + self.ada).unbind(1)
        x = x + gate_a[:, None] * self.attn(modulate(self.attn_norm(x), shift_a, scale_a), cos, sin, mask)
        if free:
            const = self.cross.null_output(text[0, 0])  # row 0 is text-free: position 0 is the null state
            rest = x[free:]
            if len(rest):
                rest = rest + self.cross(self.cross_norm(rest), text[free:], text_mask[free:])
            x = torch.cat([x[:free] + const, rest])
        else:
            x = x + self.cross(self.cross_norm(x), text, text_mask)
        x = x + gate_m[:, None] * self.mlp(modulate(self.mlp_norm(x), shift_m, scale_m))
        return x
