"""Lowering the clean targets' own floor: the pauses get quieter by the set depth, the loud speech
stays as it was, and nothing changes at depth 0."""

import numpy as np
import torch

from restore.training.floor import suppress_floor

SR = 16000


def bursts_over_hiss(seed: int = 0) -> tuple[torch.Tensor, np.ndarray]:
    """Harmonic 'syllables' 0.3 s long, 0.5 s apart, over white hiss 40 dB below them."""
    rng = np.random.default_rng(seed)
    t = np.arange(4 * SR) / SR
    voiced = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 15))
    on = (t % 0.8) < 0.3
    x = 0.2 * voiced * on + 0.002 * rng.standard_normal(len(t))
    return torch.from_numpy(x.astype(np.float32)), on


def level_db(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean(x.astype(np.float64) ** 2))


def test_the_pauses_drop_by_the_depth_and_the_speech_keeps_its_level():
    x, on = bursts_over_hiss()
    y = suppress_floor(x, 12.0).numpy()
    xn = x.numpy()
    # inside the pauses, away from the bursts' edges (the STFT frames smear 512 samples)
    pause = np.convolve(~on, np.ones(1025), "same") >= 1025
    burst = np.convolve(on, np.ones(1025), "same") >= 1025
    drop = level_db(xn[pause]) - level_db(y[pause])
    assert 10.0 < drop < 12.5
    assert abs(level_db(xn[burst]) - level_db(y[burst])) < 0.3
    # the speech waveform itself is kept, not just its level
    err = y[burst] - xn[burst]
    assert level_db(xn[burst]) - level_db(err) > 25


def test_depth_sets_how_far_the_floor_drops():
    x, on = bursts_over_hiss(1)
    pause = np.convolve(~on, np.ones(1025), "same") >= 1025
    drops = [level_db(x.numpy()[pause]) - level_db(suppress_floor(x, d).numpy()[pause]) for d in (6.0, 20.0)]
    assert 4.5 < drops[0] < 6.5 and 14.0 < drops[1] < 20.5


def test_depth_zero_and_short_input_are_left_alone_and_it_is_deterministic():
    x, _ = bursts_over_hiss(2)
    assert suppress_floor(x, 0.0) is x
    short = x[:100]
    assert suppress_floor(short, 12.0) is short
    assert torch.equal(suppress_floor(x, 12.0), suppress_floor(x, 12.0))
    assert suppress_floor(x, 12.0).shape == x.shape


def test_a_batch_is_lowered_row_by_row():
    rows = [bursts_over_hiss(s)[0] for s in (3, 4)]
    batch = suppress_floor(torch.stack(rows), 12.0)
    for row, out in zip(rows, batch):
        assert torch.allclose(suppress_floor(row, 12.0), out, atol=1e-6)
