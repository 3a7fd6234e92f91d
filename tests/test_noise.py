"""The sampler's per-window noise: drawn ahead on threads, it is the same noise as drawn inline."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from restore.config import SamplerConfig
from restore.pipeline.loop import fresh_noise_steps, noise_draws
from restore.pipeline.noise import WindowNoise


def test_drawing_ahead_on_threads_gives_the_inline_draws():
    # a window of one file, a stereo window, a window of three short files packed together
    pieces, rows = [[(5, 50)], [(1_000_003 * 2 + 1, 50)], [(7, 20), (8, 12), (9, 18)]], [1, 2, 1]
    with ThreadPoolExecutor(3) as pool:
        inline = WindowNoise(pieces, rows, (50, 7), 4)
        ahead = WindowNoise(pieces, rows, (50, 7), 4, pool=pool)
        draws = [(inline(), ahead()) for _ in range(4)]
    for a, b in draws:
        assert a.shape == (4, 50, 7) and torch.equal(a, b)
    assert not torch.equal(draws[0][0], draws[1][0])  # each call continues the streams
    # a window's stream does not depend on its neighbours: window 2 alone draws the same rows
    alone = WindowNoise([pieces[1]], [2], (50, 7), 1)()
    assert torch.equal(alone, draws[0][0][1:3])
    assert torch.equal(alone, torch.randn((2, 50, 7), generator=torch.Generator().manual_seed(pieces[1][0][0])))


def test_files_sharing_a_window_draw_their_own_streams():
    """Each file's frames of a packed window come from its own generator, as a draw of their size."""
    noise = WindowNoise([[(7, 20), (8, 12), (9, 18)]], [2], (50, 7), 2)
    first, second = noise(), noise()
    for seed, (a, b) in zip((7, 8, 9), ((0, 20), (20, 32), (32, 50))):
        g = torch.Generator().manual_seed(seed)
        assert torch.equal(first[:, a:b], torch.randn((2, b - a, 7), generator=g))
        assert torch.equal(second[:, a:b], torch.randn((2, b - a, 7), generator=g))


def test_no_draw_past_the_announced_count():
    with ThreadPoolExecutor(2) as pool:
        noise = WindowNoise([[(1, 4)]], [1], (4, 3), 2, pool=pool)
        noise(), noise()
        assert noise.pending is None  # nothing was drawn ahead for a call that will not come
        with pytest.raises(RuntimeError, match="more noise"):
            noise()


@pytest.mark.parametrize("preset, draws", [("pro", 32), ("flash", 1)])
def test_noise_draws_counts_the_start_and_each_stochastic_step(preset, draws):
    cfg = SamplerConfig.preset(preset)
    assert noise_draws(cfg) == draws
    assert fresh_noise_steps(cfg)[-1] is False  # the last step lands on t = 0 and draws nothing


def test_gpu_noise_threads_default_and_override(monkeypatch):
    from restore.engines.plan import gpu_noise_threads

    monkeypatch.delenv("RESTORE_NOISE_THREADS", raising=False)
    assert 1 <= gpu_noise_threads() <= 8
    monkeypatch.setenv("RESTORE_NOISE_THREADS", "0")
    assert gpu_noise_threads() == 0
    monkeypatch.setenv("RESTORE_NOISE_THREADS", "many")
    with pytest.raises(ValueError, match="whole number"):
        gpu_noise_threads()
