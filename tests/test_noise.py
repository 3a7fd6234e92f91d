"""The sampler's per-window noise: drawn ahead on threads, it is the same noise as drawn inline."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from restore.config import SamplerConfig
from restore.pipeline.loop import fresh_noise_steps, noise_draws
from restore.pipeline.noise import WindowNoise


def test_drawing_ahead_on_threads_gives_the_inline_draws():
    seeds, rows = [5, 1_000_003 * 2 + 1, 7], [1, 2, 1]
    with ThreadPoolExecutor(3) as pool:
        inline = WindowNoise(seeds, rows, (50, 7), 4)
        ahead = WindowNoise(seeds, rows, (50, 7), 4, pool=pool)
        draws = [(inline(), ahead()) for _ in range(4)]
    for a, b in draws:
        assert a.shape == (4, 50, 7) and torch.equal(a, b)
    assert not torch.equal(draws[0][0], draws[1][0])  # each call continues the streams
    # a window's stream does not depend on its neighbours: window 2 alone draws the same rows
    alone = WindowNoise([seeds[1]], [2], (50, 7), 1)()
    assert torch.equal(alone, draws[0][0][1:3])


def test_no_draw_past_the_announced_count():
    with ThreadPoolExecutor(2) as pool:
        noise = WindowNoise([1], [1], (4, 3), 2, pool=pool)
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
