import pytest
import torch

from restore.codec import STFTCodec, build_codec
from restore.config import CodecConfig


@pytest.mark.parametrize("scale,power", [(3.0, 0.5), (1.0, 0.3), (0.15, 1.0)])
def test_round_trip_is_exact(scale, power):
    codec = STFTCodec(CodecConfig(scale=scale, power=power))
    x = torch.randn(3, 256 * 120) * torch.logspace(-3, 0, 3)[:, None]
    y = codec.decode(codec.encode(x))
    assert y.shape == x.shape
    rel = ((y - x).norm(dim=-1) / x.norm(dim=-1)).max().item()
    assert rel < 1e-4


def test_frame_geometry():
    codec = build_codec(CodecConfig())
    z = codec.encode(torch.zeros(2, 30 * 16000))
    assert z.shape == (2, 1875, 514)
    assert codec.frames(480000) == 1875
    with pytest.raises(ValueError):
        codec.frames(1000)


def test_scale_gives_roughly_unit_variance_at_model_level():
    from tests.conftest import speechlike
    x = torch.from_numpy(speechlike(4.0))[None, : 256 * 250]
    x = x * 0.05 / x.square().mean().sqrt()
    z = STFTCodec(CodecConfig(scale=3.0)).encode(x)
    assert 0.3 < z.std().item() < 3.0


def test_silence_encodes_to_zero_and_back():
    codec = STFTCodec(CodecConfig(scale=3.0))
    z = codec.encode(torch.zeros(1, 2560))
    assert torch.isfinite(z).all() and z.abs().max() < 1e-4
    assert codec.decode(z).abs().max() < 1e-6
