import pytest
import torch

from restore import text as text_mod
from restore.codec import STFTCodec
from restore.config import CodecConfig, ModelConfig
from restore.model.dit import DiT, count_parameters
from tests.conftest import TINY_MODEL

T = 40  # frames


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict(TINY_MODEL)
    model = DiT(cfg, CodecConfig(scale=3.0)).eval()
    for p in model.parameters():  # leave the zero init: outputs must depend on every input
        torch.nn.init.normal_(p, std=0.05)
    codec = STFTCodec(CodecConfig(scale=3.0))
    deg = torch.randn(2, T * 256) * 0.05
    return model, codec, deg


def test_velocity_shape_and_dependence_on_inputs(setup):
    model, codec, deg = setup
    obs = codec.encode(deg)
    ids, mask = text_mod.batch(["hello there", None], 64)
    x, t = torch.randn(2, T, 514), torch.tensor([0.3, 0.9])
    with torch.no_grad():
        v = model(x, t, deg, obs, torch.tensor([True, True]), ids, mask)
        assert v.shape == (2, T, 514) and torch.isfinite(v).all()
        v_t = model(x, torch.tensor([0.5, 0.9]), deg, obs, torch.tensor([True, True]), ids, mask)
        v_obs = model(x, t, deg, obs * 0.5, torch.tensor([True, True]), ids, mask)
        v_u = model(x, t, deg, obs, torch.tensor([False, True]), ids, mask)
    assert not torch.allclose(v[0], v_t[0]) and torch.allclose(v[1], v_t[1], atol=1e-5)
    assert not torch.allclose(v, v_obs)
    assert not torch.allclose(v[0], v_u[0]) and torch.allclose(v[1], v_u[1], atol=1e-5)


def test_branch_context_matches_per_branch_contexts(setup):
    model, codec, deg = setup
    obs = codec.encode(deg)
    texts = ["the quick brown fox", "jumps"]
    ids, mask = text_mod.batch(texts, 64)
    free_ids, free_mask = text_mod.batch([None, None], 64)
    x, t = torch.randn(2, T, 514), torch.tensor([0.7, 0.7])
    with torch.no_grad():
        ctx = model.branch_context(deg, obs, ids, mask)
        v_all = model.velocity(x.repeat(3, 1, 1), t.repeat(3), ctx)
        u = model(x, t, deg, obs, torch.tensor([False, False]), free_ids, free_mask)
        so = model(x, t, deg, obs, torch.tensor([True, True]), free_ids, free_mask)
        sot = model(x, t, deg, obs, torch.tensor([True, True]), ids, mask)
    for got, want in zip(v_all.chunk(3), (u, so, sot)):
        assert torch.allclose(got, want, atol=1e-5)


def test_text_free_cross_attention_is_the_null_constant(setup):
    """A text-free branch attends to the null token alone: its cross-attention output is
    o_proj(v_proj(null state)) for every frame, exactly (in fp32)."""
    model, _, _ = setup
    blk = model.blocks[0]
    null = model.null_text_state()
    ids, mask = text_mod.batch([None], 64)
    text = model.text_encoder(ids, mask)
    h = torch.randn(1, T, model.config.width)
    with torch.no_grad():
        out = blk.cross(blk.cross_norm(h), text, mask)
        const = blk.cross.null_output(null)
    assert torch.allclose(out, const.expand_as(out), atol=1e-6)


def test_default_config_size():
    model = DiT(ModelConfig(), CodecConfig())
    n = count_parameters(model)
    assert 20e6 < n < 30e6
    assert count_parameters(model.blocks) == pytest.approx(18.1e6, rel=0.02)


def test_from_dict_ignores_unknown_keys():
    cfg = ModelConfig.from_dict({"width": 128, "heads": 2, "future_option": 1, "text": {"layers": 1, "x": 2}})
    assert cfg.width == 128 and cfg.text.layers == 1 and cfg.encoder.n_mels == 80


def test_group_mask_keeps_recordings_apart_and_lets_them_hear_the_silence():
    """Each recording attends to itself and to the silence, the silence only to the silence; the silence
    counts as the padding a recording would have alone (6 frames less its own, over 2 silent ones)."""
    import math

    from restore.model.layers import group_mask

    inf = float("-inf")
    m = group_mask(torch.tensor([[1, 1, 0, 2, 2, 0]]))[0, 0]
    assert m.shape == (6, 6) and m.dtype == torch.float32
    pad = math.log((6 - 2) / 2)
    assert m[0].tolist() == pytest.approx([0, 0, pad, inf, inf, pad])   # 1: itself and the silence
    assert m[3].tolist() == pytest.approx([inf, inf, pad, 0, 0, pad])   # 2: likewise
    assert m[2].tolist() == pytest.approx([inf, inf, 0, inf, inf, 0])   # the silence: only the silence
    assert (group_mask(torch.ones(1, 5, dtype=torch.long)) == 0).all()  # one recording: no mask at all
    full = group_mask(torch.tensor([[1, 1, 2, 2]]))[0, 0]               # no silence between them
    assert full[0].tolist() == [0, 0, inf, inf]


def test_the_encoders_statistics_follow_the_groups():
    """One group: the GroupNorm itself. Several: a part's frames are normalised with the statistics of
    its frames and the silence's, the silence counted as the padding the part would have alone, and do
    not depend on another part's frames."""
    from restore.model.encoder import group_norm

    norm = torch.nn.GroupNorm(1, 4)
    torch.nn.init.normal_(norm.weight)
    torch.nn.init.normal_(norm.bias)
    h = torch.randn(1, 4, 10)
    assert torch.equal(group_norm(norm, h, torch.ones(1, 10, dtype=torch.long)), norm(h))
    groups = torch.tensor([[1, 1, 1, 0, 0, 2, 2, 2, 0, 0]])
    out = group_norm(norm, h, groups)
    other = h.clone()
    other[:, :, 5:8] = 100 * torch.randn(4, 3)
    assert torch.allclose(group_norm(norm, other, groups)[:, :, :5], out[:, :, :5])
    silent, own = h[0][:, [3, 4, 8, 9]], h[0][:, :3]
    w = (10 - 3) / 4  # alone, the part's 3 frames would have 7 of padding; 4 frames of silence stand for them
    mean = (own.sum() + w * silent.sum()) / (own.numel() + w * silent.numel())
    var = ((own - mean).square().sum() + w * (silent - mean).square().sum()) / (own.numel() + w * silent.numel())
    want = (own - mean) / torch.sqrt(var + norm.eps) * norm.weight[:, None] + norm.bias[:, None]
    assert torch.allclose(out[0][:, :3], want, atol=1e-5)
    want = (silent - silent.mean()) / torch.sqrt(silent.var(unbiased=False) + norm.eps) * norm.weight[:, None] \
        + norm.bias[:, None]
    assert torch.allclose(out[0][:, [3, 4, 8, 9]], want, atol=1e-5)



def test_grouped_statistics_take_activations_of_another_dtype_than_the_weights():
    """A GPU plan runs the encoder under bf16 autocast, its GroupNorm weights in fp32; a batch with a row
    of one recording and a row of packed ones must give the activations' dtype back, both rows computed
    in fp32. (CUDA's GroupNorm refuses bf16 input with fp32 weights; the CPU's accepts it, so float64
    stands in for the mismatch here.)"""
    from restore.model.encoder import group_norm

    norm = torch.nn.GroupNorm(1, 4)
    torch.nn.init.normal_(norm.weight)
    h = torch.randn(2, 4, 10)
    groups = torch.tensor([[1] * 10, [1, 1, 1, 0, 0, 2, 2, 2, 0, 0]])
    out = group_norm(norm, h.double(), groups)
    assert out.dtype == torch.float64
    assert torch.allclose(out.float(), group_norm(norm, h, groups), atol=1e-6)
