"""The DiT of restore/model ported to MLX, module for module, so that the safetensors files load under the
reference's parameter names with nothing renamed (`blocks.3.attn.q_proj.weight` is the same array here).

One layout conversion at load, and only one: a torch Conv1d weight is (out, in, k), an MLX one is
(out, k, in) because MLX convolves channels-last. `load` transposes the encoder's conv weights.

Precision: the residual stream, norms, modulation and the per-window encoders stay in fp32; the trunk's
GEMMs take their inputs in the weights' dtype (bf16 on the GPU). Most of a bf16 forward pass's error
comes from its GEMM inputs (measured), so nothing else is rounded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..config import CodecConfig, EncoderConfig, ModelConfig, TextConfig
from ..errors import InputError
from ..model.encoder import mel_filterbank
from ..weights import FORMAT_VERSION


def linear(layer: nn.Linear, x: mx.array) -> mx.array:
    """The layer applied with its input cast to the weight dtype: a bf16 weight makes a bf16 GEMM
    (a plain call would promote the weight to the fp32 input's dtype)."""
    return layer(x.astype(layer.weight.dtype))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, affine: bool = True):
        super().__init__()
        self.eps = eps
        if affine:
            self.weight = mx.ones((dim,))

    def __call__(self, x: mx.array) -> mx.array:
        w = self.get("weight")
        return mx.fast.rms_norm(x.astype(mx.float32), None if w is None else w.astype(mx.float32), self.eps)


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, theta: float):
        super().__init__()
        self.heads, self.head_dim, self.theta = heads, width // heads, theta
        self.q_proj = nn.Linear(width, width, bias=True)
        self.k_proj = nn.Linear(width, width, bias=True)
        self.v_proj = nn.Linear(width, width, bias=True)
        self.o_proj = nn.Linear(width, width, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        b, t, c = x.shape  # (B, T, C)
        split = lambda y: y.reshape(b, t, self.heads, self.head_dim).transpose(0, 2, 1, 3)  # (B, H, T, hd)
        q, k, v = (split(linear(p, x)) for p in (self.q_proj, self.k_proj, self.v_proj))
        # rotate the two halves of each head (traditional=False): the reference's Qwen2 convention
        q = mx.fast.rope(q, self.head_dim, traditional=False, base=self.theta, scale=1.0, offset=0)
        k = mx.fast.rope(k, self.head_dim, traditional=False, base=self.theta, scale=1.0, offset=0)
        y = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim))
        return linear(self.o_proj, y.transpose(0, 2, 1, 3).reshape(b, t, c))


class CrossAttention(nn.Module):
    def __init__(self, width: int, heads: int, text_width: int):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.q_proj = nn.Linear(width, width, bias=True)
        self.k_proj = nn.Linear(text_width, width, bias=True)
        self.v_proj = nn.Linear(text_width, width, bias=True)
        self.o_proj = nn.Linear(width, width, bias=False)

    def kv(self, text: mx.array) -> tuple[mx.array, mx.array]:
        """(B, L, Wt) text states -> keys, values (B, H, L, hd); once per window, not per step."""
        b, l, _ = text.shape
        split = lambda y: y.reshape(b, l, self.heads, self.head_dim).transpose(0, 2, 1, 3)
        return split(linear(self.k_proj, text)), split(linear(self.v_proj, text))

    def null_output(self, null_state: mx.array) -> mx.array:
        """(Wt,) -> (C,): the whole cross-attention of a text-free row (softmax over one key is 1)."""
        return linear(self.o_proj, linear(self.v_proj, null_state)).astype(mx.float32)

    def __call__(self, x: mx.array, k: mx.array, v: mx.array, mask: mx.array) -> mx.array:
        b, t, c = x.shape
        q = linear(self.q_proj, x).reshape(b, t, self.heads, self.head_dim).transpose(0, 2, 1, 3)
        y = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim),
                                                 mask=mask[:, None, None, :])  # bool (B, L): keys that exist
        return linear(self.o_proj, y.transpose(0, 2, 1, 3).reshape(b, t, c))


class SwiGLU(nn.Module):
    def __init__(self, width: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(width, intermediate, bias=False)
        self.up_proj = nn.Linear(width, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, width, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return linear(self.down_proj, nn.silu(linear(self.gate_proj, x)) * linear(self.up_proj, x))


def modulate(x: mx.array, shift: mx.array, scale: mx.array) -> mx.array:
    """x (B, T, C), shift/scale (B, C)."""
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c = cfg.width
        self.attn_norm = RMSNorm(c, cfg.norm_eps, affine=False)
        self.attn = SelfAttention(c, cfg.heads, cfg.rope_theta)
        self.cross_norm = RMSNorm(c, cfg.norm_eps)
        self.cross = CrossAttention(c, cfg.heads, cfg.text.width)
        self.mlp_norm = RMSNorm(c, cfg.norm_eps, affine=False)
        self.mlp = SwiGLU(c, cfg.intermediate)
        self.ada = mx.zeros((6, c))

    def attention(self, h: mx.array, shift, scale, gate) -> mx.array:
        """The self-attention sub-layer with its residual: h (B, T, C) fp32."""
        return h + gate[:, None] * self.attn(modulate(self.attn_norm(h), shift, scale))

    def __call__(self, h: mx.array, mod: mx.array, free: int, null_out: mx.array, text=None,
                 attention=None) -> mx.array:
        """h (R, T, C), mod (R, 6, C). Rows [0, free) are text-free: their cross-attention is the constant
        `null_out` (C,). The other rows attend to `text` = (k, v, mask) of their transcript. `attention`:
        this block's attention sub-layer, compiled by the engine (default: self.attention)."""
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = mx.split(mod + self.ada, 6, axis=1)
        sq = lambda a: a.squeeze(1)
        h = (attention or self.attention)(h, sq(shift_a), sq(scale_a), sq(gate_a))
        parts = []
        if free:
            parts.append(mx.broadcast_to(null_out, (free, 1, h.shape[-1])) + h[:free])
        if free < h.shape[0]:
            rest = h[free:]
            parts.append(rest + self.cross(self.cross_norm(rest), *text).astype(mx.float32))
        h = parts[0] if len(parts) == 1 else mx.concatenate(parts)
        return h + sq(gate_m)[:, None] * self.mlp(modulate(self.mlp_norm(h), sq(shift_m), sq(scale_m)))


class GroupNorm1(nn.Module):
    """torch.nn.GroupNorm(1, C) channels-last: statistics over all of (T, C), affine per channel."""

    def __init__(self, dims: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = mx.ones((dims,)), mx.zeros((dims,))

    def __call__(self, x: mx.array) -> mx.array:  # (B, T, C)
        mean = x.mean(axis=(1, 2), keepdims=True)
        var = ((x - mean) ** 2).mean(axis=(1, 2), keepdims=True)
        return (x - mean) * mx.rsqrt(var + self.eps) * self.weight + self.bias


class SemanticEncoder(nn.Module):
    """Degraded audio (B, N) -> (B, T, out_dim) on the codec's frame grid; channels-last throughout."""

    def __init__(self, cfg: EncoderConfig, codec: CodecConfig):
        super().__init__()
        self.n_fft, self.hop = codec.n_fft, codec.hop
        w, k = cfg.width, cfg.kernel
        self.inp = nn.Conv1d(cfg.n_mels, w, k, padding=k // 2)
        self.blocks = [{"norm": GroupNorm1(w), "conv": nn.Conv1d(w, w, k, padding=k // 2), "proj": nn.Conv1d(w, w, 1)}
                       for _ in range(cfg.layers)]
        self.out = nn.Linear(w, cfg.out_dim)
        # constants, not parameters (the reference's non-persistent buffers); leading _ keeps them out of the tree
        self._fb = mx.array(mel_filterbank(codec.sample_rate, codec.n_fft, cfg.n_mels).T)  # (bins, n_mels)
        self._window = mx.array(np.hanning(codec.n_fft + 1)[:-1].astype(np.float32))  # periodic Hann

    def log_mel(self, wave: mx.array) -> mx.array:
        n, hop = self.n_fft, self.hop
        pad = (n - hop) // 2
        x = mx.pad(wave.astype(mx.float32), [(0, 0), (pad, pad)])
        t = (x.shape[1] - n) // hop + 1
        idx = mx.arange(t)[:, None] * hop + mx.arange(n)[None, :]  # (T, n_fft) frame sample indices
        spec = mx.fft.rfft(x[:, idx] * self._window, axis=-1)  # (B, T, bins)
        power = mx.real(spec) ** 2 + mx.imag(spec) ** 2
        return mx.log(power @ self._fb + 1e-6) * 0.25  # (B, T, n_mels)

    def __call__(self, wave: mx.array) -> mx.array:
        h = self.inp(self.log_mel(wave))  # (B, T, W)
        for blk in self.blocks:
            h = h + blk["proj"](nn.gelu(blk["conv"](blk["norm"](h))))  # nn.gelu is the exact (erf) GELU
        return self.out(h)


class TextEncoder(nn.Module):
    def __init__(self, cfg: TextConfig, eps: float):
        super().__init__()
        self.heads, self.width = cfg.heads, cfg.width
        self.embed = nn.Embedding(cfg.vocab_size, cfg.width)
        self.layers = [{"attn_norm": RMSNorm(cfg.width, eps), "qkv": nn.Linear(cfg.width, 3 * cfg.width),
                        "o": nn.Linear(cfg.width, cfg.width, bias=False), "mlp_norm": RMSNorm(cfg.width, eps),
                        "mlp": SwiGLU(cfg.width, cfg.width * 8 // 3)} for _ in range(cfg.layers)]
        self.norm = RMSNorm(cfg.width, eps)

    def __call__(self, ids: mx.array, mask: mx.array) -> mx.array:
        """ids, mask (B, L) -> (B, L, Wt)."""
        b, l = ids.shape
        hd = self.width // self.heads
        h = self.embed(ids)
        for layer in self.layers:
            qkv = layer["qkv"](layer["attn_norm"](h)).reshape(b, l, 3, self.heads, hd).transpose(2, 0, 3, 1, 4)
            q, k = (mx.fast.rope(a, hd, traditional=False, base=10000.0, scale=1.0, offset=0) for a in qkv[:2])
            y = mx.fast.scaled_dot_product_attention(q, k, qkv[2], scale=1.0 / math.sqrt(hd),
                                                     mask=mask[:, None, None, :])
            h = h + layer["o"](y.transpose(0, 2, 1, 3).reshape(b, l, -1))
            h = h + layer["mlp"](layer["mlp_norm"](h))
        return self.norm(h)


def timestep_features(t: mx.array, dim: int) -> mx.array:
    half = dim // 2
    freqs = mx.exp(-math.log(10000.0) * mx.arange(half, dtype=mx.float32) / half)
    ang = (t.astype(mx.float32) * 1000.0)[:, None] * freqs[None, :]
    return mx.concatenate([mx.cos(ang), mx.sin(ang)], axis=-1)


class DiT(nn.Module):
    def __init__(self, cfg: ModelConfig, codec: CodecConfig):
        super().__init__()
        self.config, self.codec = cfg, codec
        c, d = cfg.width, codec.latent_dim
        self.encoder = SemanticEncoder(cfg.encoder, codec)
        self.text_encoder = TextEncoder(cfg.text, cfg.norm_eps)
        self.x_in = nn.Linear(d, c)
        self.c_in = nn.Linear(d + cfg.encoder.out_dim, c)
        self.null_cond = mx.zeros((c,))
        self.time_mlp = [nn.Linear(cfg.time_dim, c), nn.SiLU(), nn.Linear(c, c)]  # names time_mlp.0 / .2, as torch
        self.mod = nn.Linear(c, 6 * c)
        self.blocks = [Block(cfg) for _ in range(cfg.layers)]
        self.final_norm = RMSNorm(c, cfg.norm_eps, affine=False)
        self.final_mod = nn.Linear(c, 2 * c)
        self.out = nn.Linear(c, d)

    def modulation(self, t: mx.array) -> tuple[mx.array, mx.array]:
        """(R,) -> (R, 6, C) block and (R, 2, C) final modulation."""
        temb = nn.silu(self.time_mlp[2](nn.silu(self.time_mlp[0](timestep_features(t, self.config.time_dim)))))
        r = temb.shape[0]
        return self.mod(temb).reshape(r, 6, -1), self.final_mod(temb).reshape(r, 2, -1)

    def head(self, h: mx.array, fmod: mx.array) -> mx.array:
        shift, scale = fmod[:, 0], fmod[:, 1]
        return self.out(modulate(self.final_norm(h), shift, scale))

    def null_text_state(self) -> mx.array:
        ids = mx.zeros((1, 1), dtype=mx.int32)
        return self.text_encoder(ids, mx.ones((1, 1), dtype=mx.bool_))[0, 0]


def read_config(folder: Path) -> tuple[ModelConfig, CodecConfig]:
    """config.json of a model folder, with the same format-version check as restore.weights.load."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise InputError(f"{folder}: not a model folder (no config.json)")
    cfg = json.loads(path.read_text())
    if cfg.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{folder}: model format version {cfg.get('format_version')!r} is not supported")
    return ModelConfig.from_dict(cfg.get("model")), CodecConfig.from_dict(cfg.get("codec"))


def conv_weight_names(model: DiT) -> set[str]:
    """The parameters that need the (out, in, k) -> (out, k, in) layout conversion."""
    from mlx.utils import tree_flatten
    convs = {name for name, m in model.named_modules() if isinstance(m, nn.Conv1d)}
    return {n for n, _ in tree_flatten(model.parameters()) if n.rsplit(".", 1)[0] in convs and n.endswith(".weight")}


def load(folder: str | Path) -> DiT:
    """The MLX DiT with the folder's weights, all in fp32 (callers cast the trunk for the GPU)."""
    folder = Path(folder)
    cfg, codec = read_config(folder)
    model = DiT(cfg, codec)
    convs = conv_weight_names(model)
    state: dict[str, mx.array] = {}
    for shard in sorted(folder.glob("model-*.safetensors")):
        state.update(mx.load(str(shard)))
    if not state:
        raise InputError(f"{folder}: no weight files (model-*.safetensors)")
    # the observation skip (skip.*) is applied by the sampler loop in torch, outside every engine
    items = [(k, (v.transpose(0, 2, 1) if k in convs else v).astype(mx.float32)) for k, v in state.items()
             if not k.startswith("skip.")]
    try:
        model.load_weights(items, strict=True)  # every name must match, as in restore.weights.build_model
    except ValueError as e:
        raise InputError(f"{folder}: model weights do not match the architecture ({e})") from None
    mx.eval(model.parameters())
    return model
