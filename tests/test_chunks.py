"""The worker's chunk graphs against the reference model: partitioned MLPs, the null-token constant
and the fp16 guards are each exact in fp32."""

from dataclasses import replace

import pytest
import torch

from restore import text as text_mod
from restore.codec import STFTCodec
from restore.config import CodecConfig, ModelConfig
from restore.engines.chunks import PartitionedMLP, TextFreeBranches, guarded_attention, guarded_rms, guarded_silu
from restore.model.dit import DiT
from restore.model.layers import SwiGLU

T = 48


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = ModelConfig(width=96, layers=3, heads=3, intermediate=200,
                      encoder={"width": 32, "layers": 1, "out_dim": 32}, text={"width": 32, "layers": 1, "heads": 2})
    cfg = ModelConfig.from_dict({**cfg.to_dict()})
    m = DiT(cfg, CodecConfig(scale=3.0)).eval()
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.05)
    return m


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("blocks", [1, 2, 3, 7])
def test_partitioned_mlp_is_exact(blocks):
    torch.manual_seed(1)
    mlp = SwiGLU(64, 130)
    part = PartitionedMLP(mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, blocks, guard=True)
    x = torch.randn(2, 10, 64)
    assert rel(part(x), mlp(x)) < 1e-6


def test_guards_are_exact_in_fp32():
    torch.manual_seed(2)
    x = torch.randn(4, 7, 64) * 300  # large rows: the case the guard exists for
    ref = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    assert rel(guarded_rms(x, 1e-6), ref) < 1e-6
    q, k, v = (torch.randn(1, 2, 9, 16) * 30 for _ in range(3))
    assert rel(guarded_attention(q, k, v, 0.25), torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.25)) < 1e-5
    assert rel(guarded_silu(x / 100), torch.nn.functional.silu(x / 100)) < 1e-6


def test_guarded_rms_survives_fp16_overflow():
    x = torch.full((1, 512), 400.0, dtype=torch.float16)  # 400^2 * 512 overflows fp16 (max 65504)
    naive = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    assert not torch.isfinite(naive).all() or naive.abs().max() < 0.5
    assert torch.allclose(guarded_rms(x, 1e-6).float(), torch.ones(1, 512), atol=1e-2)


@pytest.mark.parametrize("layers_per_chunk,mlp_blocks,guard,grouped", [(1, 1, False, False), (2, 3, True, False),
                                                                      (4, 2, True, False), (1, 1, False, True),
                                                                      (2, 3, True, True)])
def test_text_free_branches_match_the_reference(model, layers_per_chunk, mlp_blocks, guard, grouped):
    """Also with recordings sharing the window (frame groups: the attention mask)."""
    codec = STFTCodec(CodecConfig(scale=3.0))
    deg = torch.randn(1, T * 256) * 0.05
    obs = codec.encode(deg)
    ids, mask = text_mod.batch(["some words"], 64)
    x, t = torch.randn(1, T, 514), torch.tensor([0.6])
    groups = torch.tensor([[1] * 15 + [0] * 5 + [2] * 20 + [0] * 8]) if grouped else None
    with torch.no_grad():
        ctx = model.branch_context(deg, obs, ids, mask, groups)
        ref = model.velocity(x.repeat(3, 1, 1), t.repeat(3), ctx)  # rows u, so, sot
        tf = TextFreeBranches(model, layers_per_chunk, mlp_blocks, guard)
        assert len(tf.chunks) == -(-3 // layers_per_chunk)
        v_so = tf.velocity(x, t, ctx.cond_h[1:2], ctx.cos, ctx.sin, ctx.mask[1:2] if grouped else None)
        v_u = tf.velocity(x, t, tf.null_cond.expand(1, T, -1), ctx.cos, ctx.sin, ctx.mask[0:1] if grouped else None)
        if grouped:  # and the mask does act
            assert rel(model.velocity(x.repeat(3, 1, 1), t.repeat(3), replace(ctx, mask=None)), ref) > 1e-3
    assert rel(v_u, ref[0:1]) < 1e-5
    assert rel(v_so, ref[1:2]) < 1e-5
