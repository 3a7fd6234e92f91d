"""The observation skip: its math against a Gaussian model where the answer is known, its parameters'
round trip through the weights, and the sampler loop applying it to raw engine outputs."""

import pytest
import torch

from restore import weights
from restore.config import CodecConfig, ModelConfig
from restore.model.dit import DiT
from restore.model.precondition import ObsSkip
from restore.sampling.precondition import skip_coefficients, skip_velocity

from tests.conftest import TINY_MODEL


def gaussian_case(t: float, var: float, n: int = 400_000, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, generator=g) * 2.0
    x0 = m + var**0.5 * torch.randn(n, generator=g)
    eps = torch.randn(n, generator=g)
    return m, x0, eps, (1 - t) * x0 + t * eps


def test_exact_prior_mean_gives_the_exact_velocity():
    # var = 0: x0 is the prior mean, so x_t reveals the noise and the velocity exactly
    m, x0, eps, x = gaussian_case(0.6, 0.0)
    v = skip_velocity(torch.zeros_like(x), x, 0.6, m, torch.tensor(0.0))
    assert torch.allclose(v, eps - x0, atol=1e-5)


def test_linear_part_is_the_least_squares_estimate_and_c_its_spread():
    for t in (0.05, 0.3, 0.7, 1.0):
        for var in (0.1, 0.5, 2.0):
            m, x0, eps, x = gaussian_case(t, var)
            target = eps - x0
            v = skip_velocity(torch.zeros_like(x), x, t, m, torch.tensor(var))
            mse = (v - target).square().mean().item()
            _, c = skip_coefficients(torch.tensor(t), torch.tensor(var))
            assert abs(mse - c.item() ** 2) < 0.02 * c.item() ** 2 + 1e-4, (t, var, mse, c.item() ** 2)
            a, _ = skip_coefficients(torch.tensor(t), torch.tensor(var))
            for da in (-0.1, 0.1):  # any other gain on y does worse
                worse = -m + (a + da) * (x - (1 - t) * m)
                assert (worse - target).square().mean().item() > mse


def test_with_the_observation_as_source_the_linear_part_is_still_the_least_squares_estimate():
    from restore.sampling import Source

    g = torch.Generator().manual_seed(1)
    n = 400_000
    for t in (0.1, 0.5, 0.9, 1.0):
        for var, sigma in ((0.3, 0.5), (1.0, 0.2)):
            m, mu = torch.randn(n, generator=g) * 2.0, torch.randn(n, generator=g)
            x0 = m + var**0.5 * torch.randn(n, generator=g)
            z = mu + sigma * torch.randn(n, generator=g)
            x, target = (1 - t) * x0 + t * z, z - x0
            source = Source(mu, sigma)
            v = skip_velocity(torch.zeros_like(x), x, t, m, torch.tensor(var), source)
            mse = (v - target).square().mean().item()
            a, c = skip_coefficients(torch.tensor(t), torch.tensor(var), sigma)
            assert abs(mse - c.item() ** 2) < 0.02 * c.item() ** 2 + 1e-4, (t, var, sigma, mse, c.item() ** 2)
            for da in (-0.1, 0.1):
                worse = mu - m + (a + da) * (x - (1 - t) * m - t * mu)
                assert (worse - target).square().mean().item() > mse


def test_an_unconditioned_row_of_a_bridge_still_starts_from_the_observation():
    skip = ObsSkip(4, source="observation", source_sigma=0.5)
    obs, x, raw = torch.randn(1, 3, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    from restore.sampling import Source
    with torch.no_grad():
        u = skip.velocity(raw, x, 0.7, obs, False)
        var_u = skip.logvar[1].exp()
        assert torch.allclose(u, skip_velocity(raw, x, 0.7, 0.0, var_u, Source(obs, 0.5)))
    with pytest.raises(ValueError, match="unknown flow source"):
        ObsSkip(4, source="silence")


def test_raw_output_is_scaled_by_c():
    x, m, raw = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    var = torch.full((4,), 0.3)
    t = torch.tensor([0.2, 0.9])
    base = skip_velocity(torch.zeros_like(raw), x, t, m, var)
    _, c = skip_coefficients(t[:, None, None], var)
    assert torch.allclose(skip_velocity(raw, x, t, m, var) - base, c * raw, atol=1e-6)


def test_bound_skip_gives_the_unconditioned_branch_no_observation():
    skip = ObsSkip(4)
    obs, x = torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    raws = tuple(torch.randn(1, 3, 4) for _ in range(3))
    u, so, sot = skip.bind(obs)(raws, x, 0.7)
    with torch.no_grad():
        assert torch.allclose(u, skip.velocity(raws[0], x, 0.7, torch.zeros_like(obs), False))
        assert torch.allclose(so, skip.velocity(raws[1], x, 0.7, obs, True))
        assert not torch.allclose(u, skip.velocity(raws[0], x, 0.7, obs, True))
        (only,) = skip.bind(obs)((raws[2],), x, 0.7)
        assert torch.allclose(only, sot)
        # per-row conditioning (the trainer's form) agrees with the per-branch form
        rows = skip.velocity(torch.cat(raws[:2]), x.repeat(2, 1, 1), 0.7, obs.repeat(2, 1, 1),
                             torch.tensor([False, True]))
        assert torch.allclose(rows, torch.cat([u, so]))


def test_skip_parameters_round_trip_through_the_weights(tmp_path):
    cfg = ModelConfig.from_dict({**TINY_MODEL, "precondition": "obs_skip"})
    codec = CodecConfig(scale=3.0)
    model = DiT(cfg, codec)
    with torch.no_grad():
        model.skip.gain.uniform_(0.2, 0.9)
    weights.save(tmp_path, cfg, codec, model.state_dict(), dtype=torch.float32)
    files = weights.load(tmp_path)
    skip = weights.build_skip(files)
    assert torch.equal(skip.gain, model.skip.gain.detach())
    assert weights.build_skip(weights.load(tmp_path)) is not None
    assert "skip.gain" in files.state and weights.build_model(files).skip is not None


def test_models_without_the_skip_have_none(tmp_path):
    cfg = ModelConfig.from_dict({**TINY_MODEL, "precondition": "none"})
    codec = CodecConfig(scale=3.0)
    weights.save(tmp_path, cfg, codec, DiT(cfg, codec).state_dict(), dtype=torch.float32)
    files = weights.load(tmp_path)
    assert weights.build_skip(files) is None and not any(k.startswith("skip.") for k in files.state)


def test_skip_local_leaves_the_one_step_as_it_was():
    """At t = 1 the linear gain is 1 whatever the variance: the local variance changes no one-step estimate."""
    torch.manual_seed(0)
    obs, x, raw = torch.randn(2, 6, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    obs[:, :3] *= 1e-3  # quiet frames, where the local variance is smallest
    glob, local = ObsSkip(8), ObsSkip(8, local=1.0)
    with torch.no_grad():
        for use in (True, False, torch.tensor([True, False])):
            assert torch.allclose(glob.velocity(raw, x, 1.0, obs, use), local.velocity(raw, x, 1.0, obs, use), atol=1e-6)


def test_skip_local_takes_the_source_noise_out_where_the_observation_is_quiet():
    """Below t = 1, in a bin whose observation is silent and whose clean answer is silent, the state is the
    source noise: the global linear estimate keeps it in the clean estimate x_t - t v; the local one takes
    it out. Where the observation is loud, the local variance is the global one and nothing changes."""
    g = torch.Generator().manual_seed(0)
    t = 0.125
    obs = torch.zeros(1, 200, 8)
    obs[:, 100:] = 3.0  # the second half loud
    eps = torch.randn(1, 200, 8, generator=g)
    x = t * eps  # x0 = 0
    raw = torch.zeros_like(x)  # the linear part alone
    with torch.no_grad():
        est = {k: x - t * ObsSkip(8, local=k).velocity(raw, x, t, obs, True) for k in (0.0, 1.0)}
    quiet = slice(0, 100)
    kept = {k: e[:, quiet].norm() / x[:, quiet].norm() for k, e in est.items()}
    assert kept[0.0] > 1.0 and kept[1.0] < 0.1, kept  # global: all of it (and a little more); local: 5%
    assert torch.allclose(est[0.0][:, 100:], est[1.0][:, 100:])
    # unconditioned rows have no observation to read: they keep the global variance
    with torch.no_grad():
        u = {k: ObsSkip(8, local=k).velocity(raw, x, t, obs, False) for k in (0.0, 1.0)}
    assert torch.equal(u[0.0], u[1.0])


def test_skip_local_is_part_of_the_model_config(tmp_path):
    cfg = ModelConfig.from_dict({**TINY_MODEL, "skip_local": 1.0})
    assert DiT(cfg, CodecConfig(scale=3.0)).skip.local == 1.0
    model = DiT(cfg, CodecConfig(scale=3.0))
    weights.save(tmp_path, cfg, CodecConfig(scale=3.0), model.state_dict())
    files = weights.load(tmp_path)
    assert files.model.skip_local == 1.0 and weights.build_skip(files).local == 1.0
    assert ModelConfig.from_dict(TINY_MODEL).skip_local == 0.0  # models without it: as they were
    with pytest.raises(ValueError, match="skip_local"):
        ObsSkip(8, local=-1.0)


def test_an_anchored_skip_takes_its_prior_from_the_estimate_below_t_one():
    """BoundSkip.anchored: the conditioned branches' prior becomes the given estimate (mean, and variance
    bounded by its power), so that with no network output the linear estimate below t = 1 returns the
    estimate wherever it is quiet; the unconditioned branch is as it was. (The sampler anchors only the
    steps after its first, which the loop test below checks.)"""
    g = torch.Generator().manual_seed(0)
    skip = ObsSkip(8)
    obs, est = torch.randn(1, 200, 8, generator=g), torch.randn(1, 200, 8, generator=g)
    est[:, :100] *= 1e-3  # a quiet half
    t = 0.25
    x = (1 - t) * est + t * torch.randn(1, 200, 8, generator=g)
    raw = torch.zeros_like(x)
    plain, anchored = skip.bind(obs), skip.bind(obs).anchored(est, 2.0)
    with torch.no_grad():
        (v_p,), (v_a,) = plain((raw,), x, t), anchored((raw,), x, t)
        u_p, u_a = plain((raw,) * 3, x, t)[0], anchored((raw,) * 3, x, t)[0]
    quiet = est[:, :100].norm()
    assert (x - t * v_a)[:, :100].sub(est[:, :100]).norm() < 5 * quiet  # the noise taken out
    assert (x - t * v_p)[:, :100].sub(est[:, :100]).norm() > 100 * quiet  # the observation's prior keeps it
    assert torch.equal(u_p, u_a)


def test_the_sampler_anchors_its_later_steps_on_its_first_estimate():
    """SamplerConfig.anchor: the loop hands the first step's estimate to the skip for the steps after it;
    0 leaves every step as it was."""
    from restore.config import SamplerConfig
    from restore.pipeline.loop import generate_latents

    class Engine:  # raw outputs that depend on the state, so that every step matters
        def velocities(self, x, t, guided):
            out = 0.3 * x.tanh()
            return (out, out, out) if guided else (out,)

    g = torch.Generator().manual_seed(1)
    obs, start = torch.randn(1, 40, 8, generator=g), torch.randn(1, 40, 8, generator=g)
    skip = ObsSkip(8).bind(obs)
    runs = {}
    for anchor in (0.0, 2.0):
        cfg = SamplerConfig(steps=4, guided_until=0.0, churn=0.0, anchor=anchor)
        steps = list(generate_latents(Engine(), start, cfg, torch.Generator().manual_seed(2), skip=skip))
        runs[anchor] = [x for _, x in steps]
    assert torch.equal(runs[0.0][0], runs[2.0][0])  # the first step is the same
    assert not torch.allclose(runs[0.0][-1], runs[2.0][-1])
    # by hand: the later steps with the anchored skip
    with torch.no_grad():
        v0 = skip((Engine().velocities(start, 1.0, False)[0],), start, 1.0)[0]
        anchored = skip.anchored(start - v0, 2.0)
        x, ts = runs[2.0][0], SamplerConfig(steps=4, churn=0.0).schedule().times
        for i in range(1, 4):
            v = anchored((Engine().velocities(x, ts[i], False)[0],), x, ts[i])[0]
            x = x + (ts[i + 1] - ts[i]) * v
    assert torch.allclose(x, runs[2.0][-1], atol=1e-5)
    kept = []  # `first`: the loop hands over the first step's clean estimate, the one-step restoration
    list(generate_latents(Engine(), start, SamplerConfig(steps=4, guided_until=0.0, churn=0.0, anchor=2.0),
                          torch.Generator().manual_seed(2), skip=skip, first=kept.append))
    one = list(generate_latents(Engine(), start, SamplerConfig(steps=1, guided_until=0.0), None, skip=skip))
    assert len(kept) == 1 and torch.allclose(kept[0], one[-1][1], atol=1e-6)


def test_an_anchor_applies_row_by_row_to_the_conditioned_rows():
    """In training, rows of one batch differ in their conditions: with use_cond per row, a conditioned
    row's velocity under an anchor is the one a sampler's anchored branch gets, and an unconditioned row's
    is the unanchored one."""
    g = torch.Generator().manual_seed(3)
    skip = ObsSkip(8)
    with torch.no_grad():
        skip.logvar[0] -= 0.7  # conditioned and unconditioned rows apart
    obs, est, x, raw = (torch.randn(2, 30, 8, generator=g) for _ in range(4))
    t = torch.tensor([0.4, 0.6])
    rows = torch.tensor([True, False])
    with torch.no_grad():
        both = skip.velocity(raw, x, t, obs, rows, (est, 2.0))
        cond = skip.velocity(raw[:1], x[:1], t[:1], obs[:1], True, (est[:1], 2.0))
        uncond = skip.velocity(raw[1:], x[1:], t[1:], obs[1:], False)
        plain = skip.velocity(raw[:1], x[:1], t[:1], obs[:1], True)
    assert torch.allclose(both[:1], cond, atol=1e-6) and torch.allclose(both[1:], uncond, atol=1e-6)
    assert not torch.allclose(cond, plain, atol=1e-3)
