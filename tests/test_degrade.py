import math

import numpy as np
import pytest
import torch

from restore.training.degrade import KINDS, DegradeConfig, Degrader, _Draw, degrade_clip
from tests.conftest import speechlike

SR = 16000


@pytest.fixture(scope="module")
def clean():
    return torch.from_numpy(speechlike(4.0, SR, seed=1))[None]


def one(clean, kinds, seed=0, **cfg):
    noises = [torch.from_numpy(np.random.default_rng(5).standard_normal(SR * 3).astype(np.float32))]
    deg = Degrader(DegradeConfig(**cfg), noises=noises)
    y, rec = deg(clean, torch.Generator().manual_seed(seed), kinds)
    assert y.shape == clean.shape and torch.isfinite(y).all()
    return y, rec[0]


def db(p):
    return 10 * math.log10(p)


def band_power(x, lo, hi):
    spec = torch.fft.rfft(x[0].double()).abs().square()
    f = torch.fft.rfftfreq(x.shape[-1], 1 / SR)
    return spec[(f >= lo) & (f < hi)].sum().item()


@pytest.mark.parametrize("seed", range(5))
def test_noise_reaches_the_target_snr(clean, seed):
    y, rec = one(clean, ["noise"], seed)
    (effect,) = rec
    snr = db(clean.square().mean().item() / (y - clean).square().mean().item())
    assert abs(snr - effect["snr_db"]) < 0.5
    assert -5.0 <= effect["snr_db"] <= 30.0


def test_synthetic_noise_also_reaches_the_target_snr(clean):
    y, (effect,) = one(clean, ["noise"], 3, p_synthetic_noise=1.0)
    assert effect["source"].startswith("synthetic")
    snr = db(clean.square().mean().item() / (y - clean).square().mean().item())
    assert abs(snr - effect["snr_db"]) < 0.5


@pytest.mark.parametrize("seed", range(3))
def test_bandlimit_removes_the_band_above_the_cutoff(clean, seed):
    noisy = clean + 0.01 * torch.randn(clean.shape, generator=torch.Generator().manual_seed(seed))
    y, (effect,) = one(noisy, ["bandlimit"], seed)
    cut = effect["cutoff_hz"]
    assert 2000 <= cut <= 7000
    above_before, above_after = band_power(noisy, cut, SR / 2), band_power(y, cut, SR / 2)
    assert db(above_after / above_before) < -40
    below_before, below_after = band_power(noisy, 50, cut - 200), band_power(y, 50, cut - 200)
    assert abs(db(below_after / below_before)) < 0.5


@pytest.mark.parametrize("seed", range(3))
def test_clip_respects_the_level(clean, seed):
    y, (effect,) = one(clean, ["clip"], seed)
    level = effect["level_of_peak"] * clean.abs().max().item()
    assert y.abs().max().item() <= level * (1 + 1e-6)
    assert (y.abs() >= level * (1 - 1e-6)).sum() > 10  # something was actually clipped


def test_same_seed_same_output_other_seed_other_output(clean):
    a, ra = Degrader()(clean, torch.Generator().manual_seed(7))
    b, rb = Degrader()(clean, torch.Generator().manual_seed(7))
    c, _ = Degrader()(clean, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and ra == rb
    assert not torch.equal(a, c)


def test_simulated_reverb_decays_at_the_drawn_rt60():
    deg = Degrader()
    for rt60 in (0.3, 0.8, 1.4):
        h = deg.simulated_rir(rt60, drr_db=-5.0, seed=0)
        energy = h[1:].double().square().flip(0).cumsum(0).flip(0)  # Schroeder backward integral
        edc = 10 * torch.log10(energy / energy[0])
        t5, t25 = [(edc < -x).nonzero()[0].item() / SR for x in (5, 25)]
        measured = 3 * (t25 - t5)  # T20 extrapolated to 60 dB
        assert 0.6 * rt60 < measured < 1.3 * rt60


def test_reverb_keeps_speech_time_aligned(clean):
    y, (effect,) = one(clean, ["reverb"], 0)
    assert effect["rir"] == "simulated"
    xc = torch.fft.irfft(torch.fft.rfft(y[0], 2 * SR * 4) * torch.fft.rfft(clean[0], 2 * SR * 4).conj())
    assert xc.abs().argmax().item() < 0.002 * SR  # the direct path stays at lag ~0


def test_recorded_rir_is_aligned_to_its_direct_path(clean):
    rir = torch.zeros(SR)
    rir[400] = 1.0
    rir[400 + 800] = 0.5
    deg = Degrader(DegradeConfig(p_real_rir=1.0), rirs=[rir], rir_names=["test"])
    y, rec = deg(clean, torch.Generator().manual_seed(0), ["reverb"])
    assert rec[0][0]["rir"] == "test"
    expected = clean[0] + 0.5 * torch.nn.functional.pad(clean[0], (800, 0))[: clean.shape[-1]]
    assert torch.allclose(y[0], expected, atol=1e-4)


def test_hum_at_mains_frequency_and_target_snr(clean):
    y, (effect,) = one(clean, ["hum"], 2)
    f0 = effect["f0_hz"]
    hum = y - clean
    assert abs(db(clean.square().mean().item() / hum.square().mean().item()) - effect["snr_db"]) < 0.5
    assert band_power(hum, f0 - 2, f0 + 2) + band_power(hum, 2 * f0 - 2, 2 * f0 + 2) > 0.2 * band_power(hum, 0, SR / 2)


def test_telephone_codec_is_band_limited_and_quantised(clean):
    for seed in range(20):
        y, (effect,) = one(clean, ["codec"], seed)
        if effect["codec"] == "telephone-mulaw":
            break
    assert db(band_power(y, 3700, SR / 2) / band_power(clean, 3700, SR / 2)) < -30
    assert band_power(y, 500, 3000) > 0.5 * band_power(clean, 500, 3000)


def test_transform_codec_quantises_and_cuts_high_band(clean):
    for seed in range(20):
        y, (effect,) = one(clean, ["codec"], seed)
        if effect["codec"] == "transform":
            break
    err = (y - clean).square().mean() / clean.square().mean()
    assert 1e-4 < err.item() < 1.0
    assert band_power(y, effect["cutoff_hz"] + 100, SR / 2) < 1e-3 * band_power(clean, 0, SR / 2)


def test_dropout_zeroes_the_recorded_gaps(clean):
    y, (effect,) = one(clean, ["dropout"], 4)
    for start, length in effect["gaps_s"]:
        a, b = int(start * SR), int((start + length) * SR)
        assert y[0, a + 1 : b - 1].abs().max() == 0


def test_gain_and_eq(clean):
    y, (effect,) = one(clean, ["gain"], 1)
    assert torch.allclose(y, clean * 10 ** (effect["gain_db"] / 20), rtol=1e-5)
    y, (effect,) = one(clean, ["eq"], 1)
    assert not torch.allclose(y, clean, atol=1e-3)
    assert len(effect["peaks_hz_db"]) == 3


def test_all_kinds_at_once_and_unknown_kind(clean):
    y, rec = one(clean, list(KINDS), 0)
    assert [e["kind"] for e in rec] == list(KINDS)
    with pytest.raises(ValueError):
        one(clean, ["telephone"], 0)


def test_degrade_clip_numpy_api():
    x = speechlike(2.0, SR)
    y, rec = degrade_clip(x, seed=3, kinds=["noise", "clip"])
    y2, rec2 = degrade_clip(x, seed=3, kinds=["noise", "clip"])
    assert y.dtype == np.float32 and y.shape == x.shape
    assert np.array_equal(y, y2) and rec == rec2


@pytest.mark.slow
def test_batch_equals_clip_by_clip():
    """Batching is an implementation detail: each clip gets what it would get alone."""
    x = torch.stack([torch.from_numpy(speechlike(2.0, SR, seed=s)) for s in range(6)])
    noises = [torch.from_numpy(speechlike(3.0, SR, seed=9))]
    deg = Degrader(DegradeConfig(p_noise=0.9, p_reverb=0.5, p_codec=0.5, p_dropout=0.5, p_eq=0.5), noises=noises)
    d = _Draw(torch.Generator().manual_seed(11))
    plans = [deg._draw(d, None, x.shape[-1]) for _ in range(len(x))]
    assert len({tuple(p) for p in plans}) > 1  # clips got different effect sets
    y, rec = deg.apply(x, plans)
    for i in range(len(x)):
        yi, ri = deg.apply(x[i : i + 1], plans[i : i + 1])
        assert ri[0] == rec[i]
        assert torch.allclose(yi[0], y[i], atol=1e-5)


def test_p_clean_leaves_that_share_of_clips_untouched_and_the_test_set_alone():
    x = torch.stack([torch.from_numpy(speechlike(1.0, SR, seed=s)) for s in range(200)])
    noises = [torch.from_numpy(speechlike(3.0, SR, seed=9))]
    y, rec = Degrader(DegradeConfig(p_clean=0.5), noises=noises)(x, torch.Generator().manual_seed(2))
    untouched = [i for i, r in enumerate(rec) if not r]
    assert 0.45 < len(untouched) / len(rec) < 0.6  # half kept, plus the few that draw no effect anyway
    assert torch.equal(y[untouched], x[untouched])
    # given kinds (the test set), p_clean has no say
    forced, rec = Degrader(DegradeConfig(p_clean=1.0), noises=noises)(x[:4], torch.Generator().manual_seed(2),
                                                                        ["noise"])
    assert all(r and r[0]["kind"] == "noise" for r in rec)


def test_p_single_gives_that_share_of_clips_exactly_one_enabled_effect():
    import collections
    import random

    def sizes(cfg, n=4000):
        d = _Draw(random.Random(4))
        plans = [Degrader(cfg)._draw(d, None, SR // 4) for _ in range(n)]
        return collections.Counter(len(p) for p in plans), plans

    composed, _ = sizes(DegradeConfig(p_gain=0.0, p_hum=0.0))  # shares of 0 and 1 effects when composed
    got, plans = sizes(DegradeConfig(p_clean=0.2, p_single=0.5, p_gain=0.0, p_hum=0.0))
    assert abs(got[0] / 4000 - (0.2 + 0.4 * composed[0] / 4000)) < 0.03
    assert abs(got[1] / 4000 - (0.4 + 0.4 * composed[1] / 4000)) < 0.03
    singles = collections.Counter(next(iter(p)) for p in plans if len(p) == 1)
    assert set(singles) == set(KINDS) - {"gain", "hum"}  # disabled kinds are never the one effect
    assert max(singles.values()) < 2.5 * min(singles.values())  # drawn evenly (plus the composed ones)
    # the test set's fixed kinds are not overridden
    x = torch.from_numpy(speechlike(0.5, SR, seed=1))[None].repeat(3, 1)
    _, rec = Degrader(DegradeConfig(p_single=1.0))(x, torch.Generator().manual_seed(2), ["eq", "clip"])
    assert all([e["kind"] for e in r] == ["eq", "clip"] for r in rec)


@pytest.mark.slow
def test_python_random_draws_are_seeded_and_follow_the_probabilities():
    """Training draws its parameters from random.Random (no torch call per draw); the test sets keep
    the torch generator's stream."""
    import random
    x = torch.stack([torch.from_numpy(speechlike(0.5, SR, seed=s)) for s in range(300)])
    noises = [torch.from_numpy(speechlike(3.0, SR, seed=9))]
    deg = Degrader(DegradeConfig(p_noise=0.5, p_clip=0.2), noises=noises)
    y, rec = deg(x, random.Random(4))
    again, rec2 = deg(x, random.Random(4))
    other, _ = deg(x, random.Random(5))
    assert torch.equal(y, again) and rec == rec2 and not torch.equal(y, other)
    share = lambda kind: sum(any(e["kind"] == kind for e in r) for r in rec) / len(rec)  # noqa: E731
    assert 0.42 < share("noise") < 0.58 and 0.14 < share("clip") < 0.26


def _talkers():
    return torch.from_numpy((speechlike(12.0, SR, seed=7) * 20000).astype(np.int16))


def _noise_only(clean, seed=0, **cfg):
    """The noise a single 'noise' effect adds (degraded minus clean) and its record."""
    noises = [torch.from_numpy(np.random.default_rng(k).standard_normal(SR * 3).astype(np.float32)) for k in (5, 6)]
    deg = Degrader(DegradeConfig(p_synthetic_noise=0.0, **cfg), noises=noises, talkers=_talkers())
    y, rec = deg(clean, torch.Generator().manual_seed(seed), ["noise"])
    (effect,) = rec[0]
    return y - clean, effect


@pytest.mark.parametrize("variant", ["p_babble", "p_noise_pair", "p_noise_colour", "p_noise_bursts"])
def test_noise_variations_reach_the_target_snr(clean, variant):
    added, effect = _noise_only(clean, **{variant: 1.0})
    assert abs(db(clean.square().mean().item() / added.square().mean().item()) - effect["snr_db"]) < 0.5
    if variant == "p_babble":
        assert effect["source"].startswith("babble(") and 3 <= int(effect["source"][7:-1]) <= 8
    elif variant == "p_noise_pair":
        assert effect["pair"] == "noise1" or effect["pair"] == "noise0"
        assert -10.0 <= effect["pair_db"] <= 0.0
    elif variant == "p_noise_colour":
        assert -3.0 <= effect["colour_tilt"] <= 3.0
    else:
        assert effect["bursts"] is True


def test_babble_is_speech_and_bursts_come_and_go(clean):
    steady, _ = _noise_only(clean)
    babble, _ = _noise_only(clean, p_babble=1.0)
    assert babble.abs().sum() > 0 and not torch.allclose(steady, babble)

    def spread_db(x):  # range of the level over 250 ms blocks
        blocks = x[0, : x.shape[-1] // 4000 * 4000].view(-1, 4000).square().mean(-1)
        return db(blocks.max().item() / blocks.min().item())

    bursty = [spread_db(_noise_only(clean, seed=s, p_noise_bursts=1.0)[0]) for s in range(3)]
    assert spread_db(steady) < 3.0 and max(bursty) > 10.0


def test_noise_variations_draw_nothing_when_off(clean):
    """Test sets made before the variations existed must stay as they were: at probability 0 they draw
    nothing, so the same seed gives the same audio and the same record."""
    noises = [torch.from_numpy(np.random.default_rng(5).standard_normal(SR * 3).astype(np.float32))]
    a = Degrader(DegradeConfig(), noises=noises)(clean, torch.Generator().manual_seed(3))
    b = Degrader(DegradeConfig(), noises=noises, talkers=_talkers())(clean, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and a[1] == b[1]


def test_babble_needs_talkers():
    with pytest.raises(ValueError, match="talkers"):
        Degrader(DegradeConfig(p_babble=0.5))
