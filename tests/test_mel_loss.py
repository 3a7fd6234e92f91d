"""The log-mel distance (restore/training/mel.py) and its place in the training objective."""

import math

import pytest
import torch

from restore.config import CodecConfig
from restore.codec import STFTCodec
from restore.model.encoder import mel_filterbank
from restore.training.mel import FMAX, FMIN, LogMelDistance
from tests.conftest import speechlike
from tests.test_trainer import trainer


def _latents(seconds=2.0, seed=0, codec=CodecConfig()):
    g = torch.Generator().manual_seed(seed)
    return STFTCodec(codec).encode(torch.randn(2, int(seconds * codec.sample_rate), generator=g))


def test_the_filterbank_spans_only_the_asked_band():
    fb = mel_filterbank(16000, 512, 40, fmin=FMIN, fmax=FMAX)
    freqs = torch.linspace(0, 8000, 257).numpy()
    used = fb.sum(0) > 0
    assert fb.shape == (40, 257)
    assert freqs[used].min() > FMIN and freqs[used].max() < FMAX
    assert (fb.sum(1) > 0).all()  # no empty band at this resolution
    assert (mel_filterbank(16000, 512, 80) == mel_filterbank(16000, 512, 80, fmin=20.0, fmax=8000.0)).all()


def test_a_gain_is_its_log_ratio_and_identity_is_zero():
    codec = CodecConfig()
    d = LogMelDistance(STFTCodec(codec), floor=1e-12)
    ref = _latents(codec=codec)
    assert d(ref, ref).item() == 0.0
    # latents scaled by k scale |X|^2 by k^(2 / power): every band moves by (2 / power) ln k nepers
    k = 0.8
    assert math.isclose(d(k * ref, ref).item(), 2 / codec.power * abs(math.log(k)), rel_tol=1e-3)


def test_a_band_counts_by_its_share_of_the_mel_scale_not_of_the_energy():
    codec = CodecConfig()
    c = STFTCodec(codec)
    d = LogMelDistance(c)
    ref = c.encode(torch.from_numpy(speechlike(2.048)).float()[None])  # most of its energy below 1.3 kHz
    spec = c.spectrum(ref)

    def down(lo, hi):  # 20 dB down in bins [lo, hi)
        s = spec.clone()
        s[..., lo:hi] *= 0.1
        return c.latents(s)

    low, high = down(0, 32), down(96, 257)  # below 1 kHz; above 3 kHz (about as many mel bands)
    rel = lambda e: ((e - ref).square().mean() / ref.square().mean()).item()  # noqa: E731
    assert rel(low) > 2.5 * rel(high)  # the flow loss's mean square: the upper band hardly counts
    assert d(high, ref).item() > 0.8 * d(low, ref).item()  # the mel distance: both alike


def test_masked_frames_do_not_count():
    d = LogMelDistance(STFTCodec(CodecConfig()))
    ref = _latents()
    est = ref.clone()
    est[:, 40:] = 0  # silence where the frames are padding
    mask = torch.zeros(ref.shape[:2], dtype=torch.bool)
    mask[:, :40] = True
    assert d(est, ref, mask).item() == 0.0 and d(est, ref).item() > 1.0


@pytest.mark.slow
def test_mel_weight_joins_the_objective_and_the_log_keeps_the_flow_loss(train_data_dir, tmp_path):
    plain = trainer(train_data_dir, tmp_path / "a")
    mel = trainer(train_data_dir, tmp_path / "b", mel_weight=0.5)
    a, b = plain.batch(), mel.batch()
    assert all(torch.equal(x, y) for x, y in zip(a[:3], b[:3]))  # the same draws
    assert plain.train_step(a).item() == mel.train_step(b).item()  # the returned, logged loss: flow alone
    assert plain.last_mel is None and torch.isfinite(mel.last_mel) and mel.last_mel > 0
    moved = [not torch.equal(p, q) for p, q in zip(plain.model.parameters(), mel.model.parameters())]
    assert any(moved)  # the same first step with a different objective: different weights
    v = mel.validate(steps=1)
    assert v["val_mel_1step"] > 0 and v["input_mel"] > 0


def test_differences_under_the_floor_do_not_count():
    codec = CodecConfig()
    ref = _latents(codec=codec)
    faint = ref.clone()
    faint[:, 40:] *= 10 ** (-50 / 20 * codec.power)  # those frames 50 dB down: quiet, as between words
    hum = faint.clone()
    hum[:, 40:] *= 10 ** (10 / 20 * codec.power)  # the estimate 10 dB louder there
    assert LogMelDistance(STFTCodec(codec), floor=1e-4)(hum, faint).item() > 0.5  # 40 dB floor: it counts
    assert LogMelDistance(STFTCodec(codec), floor=1e-2)(hum, faint).item() < 0.05  # 20 dB floor: under it, it does not


def test_the_trainer_sets_the_floor_from_its_config(train_data_dir, tmp_path):
    assert trainer(train_data_dir, tmp_path / "a").mel.floor == 1e-4
    assert trainer(train_data_dir, tmp_path / "b", mel_floor_db=20.0).mel.floor == 1e-2
