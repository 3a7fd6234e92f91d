"""Bootstrap intervals: exact cases, coverage of a known mean, pairing, weights and determinism."""

import numpy as np
import pytest

from eval.bootstrap import Estimate, bootstrap_mean, paired_difference, verdict


def test_constant_values_give_a_point_interval():
    est = bootstrap_mean(np.full(20, 3.5))
    assert (est.mean, est.low, est.high, est.n) == (3.5, 3.5, 3.5, 20)


def test_interval_width_matches_standard_error():
    rng = np.random.default_rng(0)
    x = rng.normal(0.5, 1.0, size=400)
    est = bootstrap_mean(x, n_resamples=4000)
    se = x.std(ddof=1) / np.sqrt(len(x))
    assert est.low < x.mean() < est.high
    assert (est.high - est.low) == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_interval_covers_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    hits = 0
    trials = 200
    for i in range(trials):
        x = rng.exponential(2.0, size=60)  # skewed, true mean 2
        est = bootstrap_mean(x, n_resamples=1000, seed=i)
        hits += est.low <= 2.0 <= est.high
    assert 0.88 <= hits / trials <= 0.99


def test_fixed_seed_is_reproducible_and_seed_matters():
    x = np.random.default_rng(2).normal(size=50)
    assert bootstrap_mean(x, seed=7) == bootstrap_mean(x, seed=7)
    assert bootstrap_mean(x, seed=7).low != bootstrap_mean(x, seed=8).low


def test_paired_difference_of_constant_shift_is_exact_despite_clip_spread():
    rng = np.random.default_rng(3)
    base = rng.normal(0, 10, size=30)  # large variation between clips
    est = paired_difference(base + 0.25, base)
    assert est.mean == pytest.approx(0.25)
    assert est.low == pytest.approx(0.25) and est.high == pytest.approx(0.25)
    assert verdict(est, higher_is_better=True) == "better"
    assert verdict(est, higher_is_better=False) == "worse"


def test_paired_difference_of_identical_systems_is_zero():
    x = np.random.default_rng(4).normal(size=25)
    est = paired_difference(x, x)
    assert (est.mean, est.low, est.high) == (0.0, 0.0, 0.0)
    assert verdict(est, True) == "no clear difference"


def test_weighted_mean_is_corpus_ratio():
    # WER per clip with reference word counts: the weighted mean is total errors / total words.
    errors = np.array([1, 0, 6, 2])
    words = np.array([10, 5, 20, 5])
    est = bootstrap_mean(errors / words, words)
    assert est.mean == pytest.approx(errors.sum() / words.sum())


def test_nan_clips_are_left_out_of_both_systems():
    a = np.array([1.0, np.nan, 3.0, 4.0])
    b = np.array([0.0, 1.0, np.nan, 2.0])
    est = paired_difference(a, b)
    assert est.n == 2 and est.mean == pytest.approx(1.5)


def test_small_and_empty_inputs():
    assert bootstrap_mean([]).n == 0
    one = bootstrap_mean([2.0])
    assert one.mean == 2.0 and np.isnan(one.low)
    assert not Estimate(1.0, float("nan"), float("nan"), 1).excludes_zero()


def test_bad_input_raises():
    with pytest.raises(ValueError):
        paired_difference([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        bootstrap_mean([1, 2], level=1.5)


def test_no_verdict_from_too_few_clips():
    est = paired_difference([1.0, 1.1, 1.2], [0.0, 0.0, 0.0])
    assert est.excludes_zero()
    assert verdict(est, higher_is_better=True) == "too few clips"
