"""The torch modules that coreml_export converts: the text-free chunks and the codec's linear transforms,
rewritten for the Neural Engine.

Layout: (B, C, 1, S), channels first with the sequence last, every projection a 1x1 convolution (Apple's
"Deploying Transformers on the Apple Neural Engine"): the engine's native layout, where a linear layer
over (B, S, C) would cost transposes around every GEMM. Attention is computed per head with einsums the
converter lowers without rank-5 tensors. Every tensor has rank <= 4 and a fixed shape.

Numerics: the fp16 guards of chunks.py (max-abs RMSNorm, query guard with row-max subtraction, explicit
sigmoid), each exact in fp32; tests compare these modules in fp32 against TextFreeBranches and the codec.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..codec import compress as codec_compress, decompress as codec_decompress
from ..config import CodecConfig
from .chunks import QUERY_GUARD, Chunk, ChunkLayer


def _conv(w: torch.Tensor) -> nn.Parameter:
    """(out, in) linear weight -> (out, in, 1, 1) 1x1 convolution weight."""
    return nn.Parameter(w.detach().float().clone()[:, :, None, None], requires_grad=False)


def rms_channels(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Guarded RMSNorm over the channel axis of (B, C, 1, S): rows divided by their max-abs first, so the
    squares stay far below fp16's 65504. The clamp (fp16's smallest normal) keeps silent rows finite."""
    m = x.abs().amax(1, keepdim=True).clamp_min(2.0 ** -14)
    y = x / m
    return y * torch.rsqrt(y.square().mean(1, keepdim=True) + eps / m / m)


class ANELayer(nn.Module):
    """One ChunkLayer in (B, C, 1, S) layout, with its null-token constant and rotary tables baked in."""

    def __init__(self, layer: ChunkLayer, cross: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        super().__init__()
        # Python ints, not tensor shapes: a traced shape read becomes shape arithmetic in the program
        self.heads, self.hd, self.eps, self.width = layer.heads, layer.head_dim, layer.eps, layer.o_w.shape[0]
        self.qkv_w, self.o_w = _conv(layer.qkv_w), _conv(layer.o_w)
        self.qkv_b = nn.Parameter(layer.qkv_b.detach().float().clone(), requires_grad=False)
        self.register_buffer("cross", cross.detach().float().reshape(1, -1, 1, 1).clone())
        self.register_buffer("cos", cos.float().T[None, :, None, :].contiguous())  # (1, hd/2, 1, S)
        self.register_buffer("sin", sin.float().T[None, :, None, :].contiguous())
        m = layer.mlp
        self.gate = nn.ParameterList(_conv(g) for g in m.gate)
        self.up = nn.ParameterList(_conv(u) for u in m.up)
        self.down = nn.ParameterList(_conv(d) for d in m.down)

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, hd, 1, S): rotate the two halves of the head (the reference's convention)."""
        half = self.hd // 2
        x1, x2 = x[:, :half], x[:, half:]
        return torch.cat([x1 * self.cos - x2 * self.sin, x2 * self.cos + x1 * self.sin], dim=1)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        c, hd = self.width, self.hd
        q, k, v = F.conv2d(x, self.qkv_w, self.qkv_b).split(c, dim=1)  # each (B, C, 1, S)
        scale = QUERY_GUARD / math.sqrt(hd)
        out = []
        for i in range(self.heads):
            sl = slice(i * hd, (i + 1) * hd)
            qh, kh = self.rope(q[:, sl]) * scale, self.rope(k[:, sl])
            s = torch.einsum("bchq,bchk->bkhq", qh, kh)  # (B, S_k, 1, S_q): 1024x smaller than the scores
            s = s - s.amax(1, keepdim=True)
            p = torch.softmax(s * (1.0 / QUERY_GUARD), dim=1)
            out.append(torch.einsum("bkhq,bchk->bchq", p, v[:, sl]))  # (B, hd, 1, S_q)
        return F.conv2d(torch.cat(out, dim=1), self.o_w)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        out = None
        for g, u, d in zip(self.gate, self.up, self.down):  # independent blocks, each sized for the SRAM
            a = F.conv2d(x, g)
            part = F.conv2d(a * (1.0 / (1.0 + torch.exp(-a))) * F.conv2d(x, u), d)
            out = part if out is None else out + part
        return out

    def forward(self, h: torch.Tensor, mod: list[torch.Tensor]) -> torch.Tensor:
        """h (B, C, 1, S); mod: shift/scale/gate for attention and MLP, each (B, C, 1, 1)."""
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = mod
        h = h + gate_a * self.attention(rms_channels(h, self.eps) * (1 + scale_a) + shift_a)
        h = h + self.cross
        return h + gate_m * self.mlp(rms_channels(h, self.eps) * (1 + scale_m) + shift_m)


class ANEChunk(nn.Module):
    """Consecutive layers as one program: h (B, C, 1, S), mods (B, 6 L C, 1, 1) -> h (B, C, 1, S).
    mods is TextFreeBranches.modulation's (B, L, 6, C) for these L layers, flattened so it stays rank 4."""

    def __init__(self, chunk: Chunk, crosses: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        super().__init__()
        self.layers = nn.ModuleList(ANELayer(layer, crosses[i], cos, sin) for i, layer in enumerate(chunk.layers))
        self.width = self.layers[0].width

    def forward(self, h: torch.Tensor, mods: torch.Tensor) -> torch.Tensor:
        c = self.width
        for i, layer in enumerate(self.layers):
            h = layer(h, [mods[:, (6 * i + j) * c : (6 * i + j + 1) * c] for j in range(6)])
        return h


def pad_mlp_block(layer: ANELayer) -> None:
    """Add one zero intermediate column to the layer's last MLP block: silu(0) * 0 = 0 and a zero down
    column add nothing, so the output is unchanged while the weight bytes move by 3 C fp16 values."""
    g, u, d = layer.gate[-1], layer.up[-1], layer.down[-1]
    c = g.shape[1]
    layer.gate[-1] = nn.Parameter(torch.cat([g, g.new_zeros(1, c, 1, 1)]), requires_grad=False)
    layer.up[-1] = nn.Parameter(torch.cat([u, u.new_zeros(1, c, 1, 1)]), requires_grad=False)
    layer.down[-1] = nn.Parameter(torch.cat([d, d.new_zeros(c, 1, 1, 1)], dim=1), requires_grad=False)


# ---------------------------------------------------------------- codec
# The STFT codec's linear parts as matmuls with DFT bases (exact; 1x1 convolutions on the engine). The
# amplitude compression |X|^p stays in fp32 in the worker: near silence its pow needs fp32's range.
# Spectra cross the boundary scaled by SPEC_SCALE (a power of two, exact), keeping quiet bins away from
# fp16's subnormals while speech-level bins stay far below 65504.
SPEC_SCALE = 16.0


def dft_bases(cfg: CodecConfig) -> tuple[np.ndarray, np.ndarray]:
    """analysis (2 bins, n_fft): windowed rfft rows [re; im]; synthesis (2 bins, n_fft): windowed irfft."""
    n, bins = cfg.n_fft, cfg.bins
    window = np.sqrt(0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n))  # sqrt periodic Hann, as the codec
    ang = 2 * np.pi * np.outer(np.arange(bins), np.arange(n)) / n  # (bins, n)
    analysis = np.concatenate([np.cos(ang), -np.sin(ang)]) * window
    weight = np.full(bins, 2.0)
    weight[0] = weight[-1] = 1.0  # DC and Nyquist appear once in the inverse
    synthesis = np.concatenate([np.cos(ang) * weight[:, None], -np.sin(ang) * weight[:, None]]) / n * window
    return analysis, synthesis


class ANEEncode(nn.Module):
    """wave (B, N) -> SPEC_SCALE * [re; im] (B, 2 bins, 1, T). Frames overlap by half (n_fft = 2 hop), so
    a frame is two consecutive hop-long segments: two 1x1 convolutions over a (B, hop, 1, T + 1) view."""

    def __init__(self, cfg: CodecConfig, frames: int, zero_bias: bool = False):
        super().__init__()
        self.hop, self.frames = cfg.hop, frames
        a = torch.from_numpy(dft_bases(cfg)[0]).float() * SPEC_SCALE
        self.first, self.second = _conv(a[:, : cfg.hop]), _conv(a[:, cfg.hop :])
        # an all-zero bias adds nothing; export uses it to move the weight bytes off a MiB multiple
        self.bias = nn.Parameter(torch.zeros(2 * cfg.bins), requires_grad=False) if zero_bias else None

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        t, hop = self.frames, self.hop
        x = F.pad(wave, (hop // 2, hop // 2))  # the codec's centring pad: N + hop = (T + 1) hops
        seg = x.reshape(-1, t + 1, hop).permute(0, 2, 1).unsqueeze(2)  # (B, hop, 1, T + 1)
        return F.conv2d(seg[..., :t], self.first, self.bias) + F.conv2d(seg[..., 1:], self.second)


class ANEDecode(nn.Module):
    """[re; im] (B, 2 bins, 1, T) -> wave (B, T hop): inverse DFT halves, overlap-add, window-sum division."""

    def __init__(self, cfg: CodecConfig, frames: int):
        super().__init__()
        self.hop, self.frames = cfg.hop, frames
        s = torch.from_numpy(dft_bases(cfg)[1]).float().T  # (n_fft, 2 bins)
        self.first, self.second = _conv(s[: cfg.hop]), _conv(s[cfg.hop :])
        w2 = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(cfg.n_fft) / cfg.n_fft)).reshape(2, cfg.hop)
        wss = np.zeros((frames + 1, cfg.hop))
        wss[:-1] += w2[0]
        wss[1:] += w2[1]
        # the window sum is ~0 only in the outer half hops, which the crop removes; 0 there instead of
        # 1e8 (the codec's clamp) keeps the constant inside fp16 and changes no output sample
        inv = np.where(wss.T > 1e-3, 1.0 / np.maximum(wss.T, 1e-3), 0.0)
        self.register_buffer("inv_wss", torch.from_numpy(inv).float()[None, :, None, :])

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        t, hop = self.frames, self.hop
        seg = F.pad(F.conv2d(spec, self.first), (0, 1)) + F.pad(F.conv2d(spec, self.second), (1, 0))
        wave = (seg * self.inv_wss).permute(0, 2, 3, 1).reshape(-1, (t + 1) * hop)  # (B, (T + 1) hop)
        return wave[:, hop // 2 : hop // 2 + t * hop]


def compress(spec: torch.Tensor, cfg: CodecConfig) -> torch.Tensor:
    """ANEEncode's output (B, 2 bins, 1, T) -> latents (B, T, 2 bins), the codec's compression in fp32."""
    x = spec.float().squeeze(2).transpose(1, 2) / SPEC_SCALE
    return codec_compress(torch.complex(x[..., : cfg.bins], x[..., cfg.bins :]), cfg)


def decompress(latents: torch.Tensor, cfg: CodecConfig) -> torch.Tensor:
    """latents (B, T, 2 bins) -> ANEDecode's input (B, 2 bins, 1, T), in fp32."""
    spec = codec_decompress(latents, cfg)
    return torch.cat([spec.real, spec.imag], dim=-1).transpose(1, 2).unsqueeze(2)
