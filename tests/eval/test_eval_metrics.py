"""Reference-based metrics on known input: SI-SDR against its formula, PESQ and STOI at their
ceilings for identical signals and falling with noise, and the delay estimate."""

import numpy as np
import pytest

pytest.importorskip("pesq")
pytest.importorskip("pystoi")

from eval.metrics import estimate_lag_ms, pesq_wb, si_sdr, stoi_score  # noqa: E402


def _orthogonal_noise(s: np.ndarray, seed: int) -> np.ndarray:
    """Zero-mean noise with exactly zero correlation with zero-mean s."""
    rng = np.random.default_rng(seed)
    s = s - s.mean()
    n = rng.standard_normal(len(s))
    n -= n.mean()
    n -= np.dot(n, s) / np.dot(s, s) * s
    return n


def test_si_sdr_matches_formula_for_scaled_signal_plus_noise(speech):
    s = speech(3.0).astype(np.float64)
    s -= s.mean()
    n = _orthogonal_noise(s, 0)
    n *= 0.1 * np.linalg.norm(s) / np.linalg.norm(n)
    a = 0.37
    # With noise orthogonal to s: target = a*s, residual = n, so SI-SDR = 10 log10(a^2 |s|^2 / |n|^2).
    expected = 10 * np.log10(a**2 * np.dot(s, s) / np.dot(n, n))
    assert si_sdr(a * s + n, s) == pytest.approx(expected, abs=1e-6)
    # noise at 0.1 of the clean amplitude, signal scaled by 0.37: 20*log10(0.37 / 0.1) = 11.36 dB
    assert expected == pytest.approx(20 * np.log10(3.7), abs=1e-9)


def test_si_sdr_ignores_scale_and_offset_and_is_huge_for_identity(speech):
    s = speech(2.0)
    assert si_sdr(s, s) > 150
    assert si_sdr(3.0 * s + 0.1, s) > 100  # gain and DC offset are not distortion
    assert si_sdr(-s, s) > 100  # a polarity flip is a scale of -1


def test_si_sdr_general_case_against_direct_computation(speech):
    rng = np.random.default_rng(3)
    s = speech(2.0).astype(np.float64)
    e = 0.8 * s + 0.2 * rng.standard_normal(len(s))
    s0, e0 = s - s.mean(), e - e.mean()
    target = np.dot(e0, s0) / np.dot(s0, s0) * s0
    expected = 10 * np.log10(np.sum(target**2) / np.sum((e0 - target) ** 2))
    assert si_sdr(e, s) == pytest.approx(expected, abs=1e-9)


def test_si_sdr_rejects_silent_reference():
    with pytest.raises(ValueError):
        si_sdr(np.ones(100), np.zeros(100))


def test_pesq_identical_is_ceiling_and_noise_lowers_it(speech):
    s = speech(4.0)
    noise = np.random.default_rng(0).standard_normal(len(s)).astype(np.float32)
    noise *= np.sqrt(np.mean(s**2) / np.mean(noise**2))
    assert pesq_wb(s, s) == pytest.approx(4.644, abs=0.01)
    light, heavy = pesq_wb(s + 0.05 * noise, s), pesq_wb(s + 0.5 * noise, s)
    assert 1.0 <= heavy < light < 4.5


def test_pesq_returns_nan_when_reference_has_no_speech(speech):
    s = speech(3.0)
    assert np.isnan(pesq_wb(s, np.zeros_like(s)))


def test_stoi_identical_is_one_and_noise_lowers_it(speech):
    s = speech(4.0)
    noise = np.random.default_rng(1).standard_normal(len(s)).astype(np.float32)
    noise *= np.sqrt(np.mean(s**2) / np.mean(noise**2))
    assert stoi_score(s, s) == pytest.approx(1.0, abs=1e-6)
    light, heavy = stoi_score(s + 0.1 * noise, s), stoi_score(s + 2.0 * noise, s)
    assert heavy < light < 0.999


def test_metrics_cut_to_common_length(speech):
    s = speech(3.0)
    assert stoi_score(np.concatenate([s, np.zeros(800, np.float32)]), s) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("delay", [0, 37, -80, 1600])
def test_lag_estimate_finds_known_delay(speech, delay):
    s = speech(3.0)
    late = np.roll(s, delay)
    assert estimate_lag_ms(late, s) == pytest.approx(delay / 16, abs=1e-9)
