"""Samplers against an analytic velocity field: data ~ N(mu, s^2) per coordinate, for which the
rectified-flow velocity and the ODE's solution are known in closed form."""

import math

import pytest
import torch

from restore.sampling import combine, guided_steps, step, timesteps

MU, S = 1.5, 0.5


def velocity(x, t):
    # x_t = (1 - t) x0 + t eps: mean m_t = (1 - t) mu, variance v_t = (1 - t)^2 s^2 + t^2.
    # E[eps - x0 | x_t] is linear in x_t.
    m = (1 - t) * MU
    var = (1 - t) ** 2 * S**2 + t**2
    cov_eps = t            # Cov(eps, x_t)
    cov_x0 = (1 - t) * S**2  # Cov(x0, x_t)
    return (cov_eps - cov_x0) / var * (x - m) - MU


def exact(x1, t):
    """ODE solution from t = 1: the flow maps quantiles, x_t = m_t + sd_t * (x1 - m_1) / sd_1."""
    sd = math.sqrt((1 - t) ** 2 * S**2 + t**2)
    return (1 - t) * MU + sd * x1


def run(x, steps, churn, gen):
    ts = timesteps(steps).tolist()
    for i in range(steps):
        noise = torch.randn(x.shape, generator=gen, dtype=torch.float64) if churn else None
        x = step(x, velocity(x, ts[i]), ts[i], ts[i + 1], churn, noise)
    return x


def test_euler_converges_to_exact_ode_solution():
    x1 = torch.randn(1000, dtype=torch.float64)
    errs = [(run(x1, n, 0.0, None).double() - exact(x1, 0.0)).abs().max().item() for n in (32, 128, 512)]
    assert errs[2] < 0.01
    for coarse, fine in zip(errs, errs[1:]):  # first order: 4x the steps, about 1/4 the error
        assert 3.0 < coarse / fine < 5.0


@pytest.mark.slow
@pytest.mark.parametrize("churn", [0.0, 0.3, 1.0])
def test_samples_have_the_data_distribution(churn):
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(200_000, generator=g, dtype=torch.float64)
    x0 = run(x1, 256, churn, g)
    assert abs(x0.mean().item() - MU) < 0.01
    assert abs(x0.std().item() - S) < 0.01


Y, SIGMA = -0.7, 0.4  # a bridge: the path starts from the observation Y plus noise of scale SIGMA


def bridge_velocity(x, t):
    # x_t = (1 - t) x0 + t (Y + SIGMA eps): E[z - x0 | x_t] is linear in x_t as well
    m = (1 - t) * MU + t * Y
    var = (1 - t) ** 2 * S**2 + t**2 * SIGMA**2
    cov = t * SIGMA**2 - (1 - t) * S**2  # Cov(z - x0, x_t)
    return (Y - MU) + cov / var * (x - m)


@pytest.mark.slow
@pytest.mark.parametrize("churn", [0.0, 0.3, 1.0])
def test_a_bridge_from_the_observation_samples_the_data_distribution(churn):
    from restore.sampling import Source

    source = Source(torch.tensor(Y, dtype=torch.float64), SIGMA)
    g = torch.Generator().manual_seed(0)
    x = source.sample(torch.randn(200_000, generator=g, dtype=torch.float64))
    assert abs(x.mean().item() - Y) < 0.01 and abs(x.std().item() - SIGMA) < 0.01  # starts at the observation
    ts = timesteps(256).tolist()
    for i in range(256):
        noise = torch.randn(x.shape, generator=g, dtype=torch.float64) if churn else None
        x = step(x, bridge_velocity(x, ts[i]), ts[i], ts[i + 1], churn, noise, source)
    assert abs(x.mean().item() - MU) < 0.01
    assert abs(x.std().item() - S) < 0.01


def test_the_noise_source_is_the_plain_path():
    from restore.sampling import NOISE, source_for

    g = torch.Generator().manual_seed(0)
    x, v, noise, obs = (torch.randn(2, 3, 4, generator=g) for _ in range(4))
    assert source_for("noise", 0.3, obs) is NOISE and torch.equal(NOISE.sample(noise), noise)
    c = 0.4  # what renoise_fraction gives is tested above; here only the arithmetic
    x0, eps = x - 0.7 * v, x + 0.3 * v
    plain = 0.5 * x0 + 0.5 * (math.sqrt(1 - c * c) * eps + c * noise)
    from restore.sampling.samplers import renoise_fraction
    churn = c / renoise_fraction(0.7, 0.5, 1.0)
    assert torch.allclose(step(x, v, 0.7, 0.5, churn, noise), plain, atol=1e-6)
    # the bridge re-noises around the observation: the same draw lands t_next (1 - sqrt(1 - c^2)) obs away
    bridge = source_for("observation", 1.0, obs)
    assert torch.allclose(step(x, v, 0.7, 0.5, churn, noise, bridge) - plain,
                          0.5 * (1 - math.sqrt(1 - c * c)) * obs, atol=1e-5)
    with pytest.raises(ValueError, match="unknown flow source"):
        source_for("silence", 1.0, obs)


def test_renoise_fraction():
    from restore.sampling.samplers import renoise_fraction
    assert renoise_fraction(0.5, 0.4, 0.0) == 0.0
    assert renoise_fraction(0.5, 0.0, 1.0) == 0.0          # the last step adds no noise
    assert renoise_fraction(1.0, 0.9, 1.0) == pytest.approx(1.0)  # from pure noise: all fresh
    small, large = renoise_fraction(0.5, 0.49, 1.0), renoise_fraction(0.5, 0.3, 1.0)
    assert 0 < small < large < 1                             # shrinks with the step size


def test_step_is_fp32_and_euler_when_deterministic():
    x, v = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.bfloat16)
    y = step(x, v, 0.8, 0.6)
    assert y.dtype == torch.float32
    assert torch.allclose(y, (x + (0.6 - 0.8) * v.double()).float(), atol=1e-6)
    with pytest.raises(ValueError):
        step(x, v, 0.8, 0.6, churn=0.2)


def test_timesteps_and_guided_steps():
    ts = timesteps(10, shift=3.0)
    assert ts[0] == 1.0 and ts[-1] == 0.0 and (ts[1:] < ts[:-1]).all()
    assert ts[5] > 0.5  # shift > 1 spends more steps near the noise end
    assert guided_steps(8, 0.5) == [True] * 4 + [False] * 4
    assert guided_steps(8, 0.0) == [False] * 8
    with pytest.raises(ValueError):
        timesteps(0)


def test_guidance_combination():
    u, so, sot = torch.tensor([1.0]), torch.tensor([2.0]), torch.tensor([4.0])
    assert combine(u, so, sot, 1.0, 1.0).item() == 4.0   # no guidance: sot
    assert combine(u, so, sot, 2.0, 1.0).item() == 5.0   # 1 + 2*(2-1) + (4-2)
    assert combine(u, so, sot, 1.0, 3.0).item() == 8.0   # 2 + 3*(4-2)
    assert combine(u, so, sot, 0.0, 0.0).item() == 1.0   # u alone


def test_schedule_from_noise_is_the_plain_grid():
    from restore.sampling import schedule

    s = schedule(8, 1.0, 0.5, 0.3)
    assert s.times == timesteps(8).tolist() and s.guided == guided_steps(8, 0.5) and s.churn == [0.3] * 8
    assert s.evaluations == 8 and s.fresh_noise() == [True] * 7 + [False]
    assert schedule(4, churn=0.0).fresh_noise() == [False] * 4


def test_schedule_that_refines_starts_with_one_unguided_step_and_renoises_in_full():
    from restore.sampling import schedule

    s = schedule(8, 1.0, 0.5, 0.2, refine_from=0.5)
    assert s.evaluations == 9
    assert s.times[:2] == [1.0, 0.5] and s.times[-1] == 0.0 and s.times[2] == pytest.approx(0.4375)
    assert s.guided == [False] + [True] * 4 + [False] * 4
    assert s.churn[0] == 1.0 and s.churn[1:] == [0.2] * 8
    # the first step lands on x = (1 - 0.5) x0_hat + 0.5 noise, whatever the estimate of the noise
    g = torch.Generator().manual_seed(0)
    x, v, fresh = (torch.randn(2, 3, generator=g) for _ in range(3))
    x0_hat = x - 1.0 * v
    assert torch.allclose(step(x, v, 1.0, 0.5, s.churn[0], fresh), 0.5 * x0_hat + 0.5 * fresh, atol=1e-6)
    with pytest.raises(ValueError, match="refine_from"):
        schedule(4, refine_from=0.0)
