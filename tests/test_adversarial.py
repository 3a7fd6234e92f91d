"""The adversarial term's parts: the crops, the discriminators learning to tell clean speech-like sound
from the same with noise, and the weighting of the rows they judge."""

import math

import pytest
import torch

from restore.training.adversarial import (MultiResolutionDiscriminator, crop_frames, discriminator_loss,
                                          generator_terms)

RATE = 16000


def voiced(b: int, n: int, seed: int) -> torch.Tensor:
    """(b, n) harmonic tones with a slow pitch glide and syllable-rate amplitude: clean and tonal."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n) / RATE
    f0 = 100 + 150 * torch.rand(b, 1, generator=g)
    phase = 2 * math.pi * torch.cumsum(f0 * (1 + 0.1 * torch.sin(2 * math.pi * 0.5 * t)) / RATE, -1)
    x = sum(torch.sin(k * phase) / k for k in range(1, 12))
    return 0.1 * x * (0.6 + 0.4 * torch.sin(2 * math.pi * 4 * t + 6 * torch.rand(b, 1, generator=g)))


def test_crop_frames_takes_each_rows_own_frames():
    x = torch.arange(2 * 10 * 3, dtype=torch.float32).reshape(2, 10, 3)
    out = crop_frames(x, torch.tensor([0, 6]), 4)
    assert torch.equal(out[0], x[0, 0:4]) and torch.equal(out[1], x[1, 6:10])


@pytest.mark.slow
def test_discriminators_learn_to_tell_clean_from_noisy_and_score_the_generator_by_it():
    torch.manual_seed(0)
    disc = MultiResolutionDiscriminator(channels=8)
    opt = torch.optim.AdamW(disc.parameters(), 2e-3, betas=(0.8, 0.99))
    n = 8000
    ones = torch.ones(4)
    for step in range(60):
        clean = voiced(4, n, step)
        noisy = clean + 0.03 * torch.randn(4, n)
        loss = discriminator_loss(disc, clean, noisy, ones)
        opt.zero_grad()
        loss.backward()
        opt.step()
    clean = voiced(4, n, 1000)
    noisy = clean + 0.03 * torch.randn(4, n)
    with torch.no_grad():
        adv_clean, _ = generator_terms(disc, clean, clean, ones)
        adv_noisy, fm_noisy = generator_terms(disc, clean, noisy, ones)
        _, fm_clean = generator_terms(disc, clean, clean, ones)
    assert adv_noisy > adv_clean + 0.2  # the estimate that keeps noise is told apart
    assert fm_clean == 0 and fm_noisy > 0.05
    # and the generator's gradient points from the noisy towards the clean: a small step along it helps
    est = noisy.clone().requires_grad_(True)
    adv, fm = generator_terms(disc, clean, est, ones)
    g, = torch.autograd.grad(adv + fm, est)
    with torch.no_grad():
        adv2, fm2 = generator_terms(disc, clean, est - 1e-3 * g / g.abs().mean(), ones)
    assert adv2 + fm2 < adv + fm


def test_rows_not_judged_do_not_count():
    torch.manual_seed(0)
    disc = MultiResolutionDiscriminator(channels=4)
    real = voiced(2, 4000, 0)
    fake = real + 0.05 * torch.randn(2, 4000)
    other = fake.clone()
    other[1] = torch.randn(4000)
    w = torch.tensor([1.0, 0.0])
    with torch.no_grad():
        assert discriminator_loss(disc, real, fake, w) == pytest.approx(discriminator_loss(disc, real, other, w).item())
        a, b = generator_terms(disc, real, fake, w), generator_terms(disc, real, other, w)
    assert a[0] == pytest.approx(b[0].item()) and a[1] == pytest.approx(b[1].item())
