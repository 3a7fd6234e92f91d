"""The trainer on the CPU with a tiny model and a data folder the test writes (the same int16 shard
format scripts/prepare_data.py writes): it learns, checkpoints, resumes exactly, exports weights the
restorer loads, and starts an observation skip from a model that had none."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from restore import weights
from restore.config import CodecConfig, ModelConfig
from restore.model.dit import DiT
from restore.sampling import timesteps
from restore.training.degrade import DegradeConfig
from restore.training.trainer import TrainConfig, Trainer, lr_scale
from restore.training import trainer as trainer_mod
from tests.conftest import TINY_MODEL


def trainer(train_data_dir, out, init=None, precondition="obs_skip", seed=0, model=None, **train):
    cfg = TrainConfig(**{"batch": 2, "window_seconds": 4.096, "compile": False, "bf16": False, "warmup": 5,
                         "lr": 1e-3, "seed": seed, "log_every": 5, "val_every": 1000, "minutes": 0.0, **train})
    model = ModelConfig.from_dict({**TINY_MODEL, "precondition": precondition, **(model or {})})
    return Trainer(cfg, model, CodecConfig(scale=3.0), train_data_dir, out, device="cpu", init=init)


@pytest.mark.slow
def test_loss_falls_and_checkpoint_resumes_exactly(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run")
    before = tr.validate(steps=1)["val_loss"]  # fixed windows, t and noise: no batch-to-batch noise
    for _ in range(30):
        tr.train_step(tr.batch())
    assert tr.validate(steps=1)["val_loss"] < 0.99 * before  # the EMA weights, 30 steps in: -3%
    tr.save_checkpoint()
    after = [tr.train_step(tr.batch()).item() for _ in range(3)]

    again = trainer(train_data_dir, tmp_path / "run")
    assert again.resume() and again.step == 30
    assert [again.train_step(again.batch()).item() for _ in range(3)] == pytest.approx(after, rel=1e-5)


@pytest.mark.slow
def test_validation_reports_the_skip_model_and_export_loads(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run")
    for _ in range(3):
        tr.train_step(tr.batch())
    v = tr.validate(steps=2)
    assert {"val_loss", "val_x0_err_t1", "obs_x0_err", "val_si_sdr", "val_lsd"} <= set(v)
    assert all(np.isfinite(x) for x in v.values())
    paths = tr.export(tmp_path / "export")
    assert all(p.stat().st_size <= 16 * 2**20 for p in paths)
    files = weights.load(tmp_path / "export")
    assert files.model.precondition == "obs_skip" and files.info["train_steps"] == 3
    assert files.info["degrade_config"]["p_gain"] == 0.0  # what the run degraded with (training drops gain)
    assert weights.build_skip(files) is not None and weights.build_model(files) is not None
    json.loads((tmp_path / "export" / "config.json").read_text())  # valid JSON with the format version


@pytest.mark.slow
def test_a_bridge_trains_on_paths_from_the_observation_and_exports_its_source(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run", model={"source": "observation", "source_sigma": 0.5})
    _, degraded, *_ = batch = tr.batch()
    obs = tr.codec.encode(degraded)
    eps = torch.randn(obs.shape)
    assert torch.allclose(tr.source(obs).sample(eps), obs + 0.5 * eps)
    # the same weights learn a different task from the noise path: the first steps' losses differ
    plain = trainer(train_data_dir, tmp_path / "plain")
    assert abs(tr.train_step(batch).item() - plain.train_step(batch).item()) > 1e-3
    for _ in range(2):
        assert torch.isfinite(tr.train_step(tr.batch()))
    v = tr.validate(steps=2)
    assert all(np.isfinite(x) for x in v.values())
    tr.export(tmp_path / "export")
    files = weights.load(tmp_path / "export")
    assert (files.model.source, files.model.source_sigma) == ("observation", 0.5)
    skip = weights.build_skip(files)
    assert (skip.source, skip.source_sigma) == ("observation", 0.5)


def test_init_from_a_model_without_the_skip_restarts_only_the_output_layer(train_data_dir, tmp_path):
    cfg = ModelConfig.from_dict({**TINY_MODEL, "precondition": "none"})
    old = DiT(cfg, CodecConfig(scale=3.0))
    with torch.no_grad():
        for p in old.parameters():
            p.add_(0.01)
    weights.save(tmp_path / "old", cfg, CodecConfig(scale=3.0), old.state_dict(), dtype=torch.float32)
    tr = trainer(train_data_dir, tmp_path / "run", init=tmp_path / "old")
    assert torch.equal(tr.model.x_in.weight, old.x_in.weight.float())
    assert tr.model.out.weight.abs().max() == 0 and tr.model.out.bias.abs().max() == 0
    with pytest.raises(ValueError):  # the reverse would drop learned parameters: refused
        weights.save(tmp_path / "new", ModelConfig.from_dict({**TINY_MODEL, "precondition": "obs_skip"}),
                     CodecConfig(scale=3.0), tr.model.state_dict(), dtype=torch.float32)
        trainer(train_data_dir, tmp_path / "run2", init=tmp_path / "new", precondition="none")


def test_lr_holds_then_falls_to_zero_over_the_last_share_of_the_run():
    assert lr_scale(0.0, 100.0, 0.25) == 1.0 and lr_scale(75.0, 100.0, 0.25) == 1.0
    assert lr_scale(87.5, 100.0, 0.25) == pytest.approx(0.5)
    assert lr_scale(100.0, 100.0, 0.25) == 0.0 and lr_scale(120.0, 100.0, 0.25) == 0.0
    assert lr_scale(99.0, 100.0, 0.0) == 1.0  # decay off: constant after warm-up


@pytest.mark.slow
def test_a_zero_learning_rate_step_leaves_the_weights_unchanged(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run")
    tr.train_step(tr.batch())
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    tr.train_step(tr.batch(), lr_scale=0.0)
    assert all(torch.equal(before[k], v) for k, v in tr.model.state_dict().items())
    tr.train_step(tr.batch(), lr_scale=1.0)
    assert any(not torch.equal(before[k], v) for k, v in tr.model.state_dict().items())


def test_t_one_puts_that_share_of_the_batch_at_t_equal_one(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run")
    t = tr.draw_t(4000)
    assert (t == 1).sum() == 0 and t.min() >= 0 and t.max() < 1  # default: plain uniform
    tr.cfg = TrainConfig.from_dict({**tr.cfg.to_dict(), "t_one": 0.3})
    t = tr.draw_t(4000)
    assert abs((t == 1).float().mean().item() - 0.3) < 0.03
    rest = t[t < 1]
    assert abs(rest.mean().item() - 0.5) < 0.03  # the others still uniform


@pytest.mark.slow
def test_target_floor_lowers_the_targets_floor_and_leaves_the_inputs(train_data_dir, tmp_path):
    plain = trainer(train_data_dir, tmp_path / "a")
    clean, target, _, _ = plain.data.window_batch(2)
    assert target is clean  # off by default: one tensor, nothing extra
    floored = trainer(train_data_dir, tmp_path / "b", target_floor_db=12.0)
    raw, target, _, _ = floored.data.window_batch(2)
    assert torch.equal(raw, clean)  # the degraded inputs are still made from the recordings as they are
    db = lambda x: 10 * torch.log10(x.square().mean())  # noqa: E731
    assert db(raw) - db(target - raw) > 20  # the speech is kept
    blocks = lambda x: x.reshape(-1, 512).square().mean(-1)  # noqa: E731
    quiet = blocks(raw) < 2 * blocks(raw).quantile(0.1)  # the fixture's hiss between syllables
    drop = 10 * torch.log10(blocks(raw)[quiet].sum() / blocks(target)[quiet].sum())
    assert drop > 6
    # the same draws in both trainers: the same degraded input, and the floored target as the clean side
    a, b = plain.batch(), floored.batch()
    assert torch.equal(a[1], b[1]) and not torch.equal(a[0], b[0])
    assert torch.isfinite(floored.train_step(b))


def test_band_level_measures_a_dull_band():
    from restore.training.trainer import band_level

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(2, 16000, generator=g)
    spec = torch.fft.rfft(ref)
    spec[:, torch.fft.rfftfreq(16000, 1 / 16000) > 3000] *= 0.1  # 20 dB down above 3 kHz
    dull = torch.fft.irfft(spec, n=16000)
    assert band_level(ref, ref, 16000) == pytest.approx(0.0, abs=1e-4)
    assert band_level(dull, ref, 16000) == pytest.approx(-20.0, abs=1.5)  # less the window's leakage at the edge


def test_validation_scores_the_one_step_estimate(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run")
    tr.train_step(tr.batch())
    val = tr.validate(steps=2)
    assert {"val_lsd_1step", "val_high_db_1step"} <= set(val)
    assert np.isfinite(val["val_lsd_1step"]) and np.isfinite(val["val_high_db_1step"])


def test_a_run_sets_the_switch_interval_while_it_trains_and_restores_it(train_data_dir, tmp_path):
    import sys
    tr = trainer(train_data_dir, tmp_path / "run", minutes=0.01, switch_interval_ms=0.5)
    seen, step = [], tr.train_step
    tr.train_step = lambda *a, **k: (seen.append(sys.getswitchinterval()), step(*a, **k))[1]
    before = sys.getswitchinterval()
    tr.run()
    assert seen and all(s == pytest.approx(0.0005) for s in seen)
    assert sys.getswitchinterval() == before
    start = json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["switch_interval_ms"] == 0.5
    assert (tmp_path / "run" / "ckpt.pt").exists()


@pytest.mark.slow
def test_validate_model_scores_finished_models_as_the_training_log_does(train_data_dir, tiny_model, tmp_path):
    script = Path(__file__).resolve().parent.parent / "scripts" / "validate_model.py"
    out = subprocess.run([sys.executable, str(script), str(train_data_dir), str(tiny_model)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    files = weights.load(tiny_model)
    tr = Trainer(TrainConfig(compile=False, bf16=False, producer="inline", batch=2), files.model, files.codec,
                 train_data_dir, tmp_path / "run", device="cpu", init=tiny_model)
    want = tr.validate()
    assert got["model"] == str(tiny_model) and got["val_loss"] == pytest.approx(want["val_loss"], abs=1e-4)
    assert got["val_x0_err_t1"] == pytest.approx(want["val_x0_err_t1"], abs=1e-4)


def test_own_estimate_rows_start_from_the_models_estimate_and_aim_at_the_clean(train_data_dir, tmp_path):
    """With p_own_estimate, a fixed share of each batch starts its path from the EMA model's one-step
    estimate at a flow time in own_t; the target still points at the clean latents (x_t - t v = x0)."""
    tr = trainer(train_data_dir, tmp_path / "run", batch=4, p_own_estimate=0.5, own_t=(0.2, 0.6))
    seen = {}
    forward = tr.forward

    def spy(xt, t, *rest):
        seen["xt"], seen["t"] = xt.detach().clone(), t.detach().clone()
        return forward(xt, t, *rest)

    tr.forward = spy
    batch = tr.batch()
    loss = tr.train_step(batch)
    assert torch.isfinite(loss)
    t = seen["t"]
    assert ((t[:2] >= 0.2) & (t[:2] <= 0.6)).all()
    # the own rows' x_t is off the straight path from the clean latents (it carries the estimate); the others' on it
    x0 = tr.codec.encode(batch[0])
    resid = seen["xt"] - (1 - t[:, None, None]) * x0
    eps_like = resid / t[:, None, None]
    assert eps_like[:2].std() > 1.1 * eps_like[2:].std()
    for _ in range(3):
        assert torch.isfinite(tr.train_step(tr.batch()))
    val = tr.validate(steps=1)
    assert {"val_lsd_refine", "val_si_sdr_refine", "val_high_db_refine"} <= set(val)


def test_own_rows_are_the_samplers_own_states_after_k_of_its_steps(train_data_dir, tmp_path):
    """With own_steps, the own rows are where the EMA model's own sampler stands after k steps (k cycling
    through 1..N-1 with the step count), at that step's flow time, aimed at the clean latents."""
    n = 4
    tr = trainer(train_data_dir, tmp_path / "run", batch=4, p_own_estimate=0.5, own_steps=n, own_churn=0.0,
                 model={"source": "observation", "source_sigma": 0.5})
    grid = timesteps(n).tolist()
    calls, seen = [], {}
    ema_velocity, forward = tr.ema_velocity, tr.forward

    def ema_spy(x, t, *rest):
        v = ema_velocity(x, t, *rest)
        calls.append((x.clone(), t.clone(), v.clone()))
        return v

    def spy(xt, t, *rest):
        seen["xt"], seen["t"] = xt.detach().clone(), t.detach().clone()
        return forward(xt, t, *rest)

    tr.ema_velocity, tr.forward = ema_spy, spy
    for k in (1, 2, 3, 1):
        calls.clear()
        batch = tr.batch()
        tr.train_step(batch)
        assert [c[1][0].item() for c in calls] == pytest.approx(grid[:k])
        # churn 0: Euler steps of the flow, x_s = x_t + (s - t) v, each from the state the last one reached
        state = calls[0][0]
        for i, (x, _, v) in enumerate(calls):
            assert torch.allclose(x, state, atol=1e-5)
            state = x + (grid[i + 1] - grid[i]) * v
        assert torch.allclose(seen["xt"][:2], state, atol=1e-5)
        assert torch.allclose(seen["t"][:2], torch.full((2,), grid[k]))
        # the other rows are on the straight path from the clean latents as before
        assert not torch.allclose(seen["t"][2:], torch.full((2,), grid[k]))


def test_own_anchor_samples_and_trains_the_own_rows_on_the_first_estimate(train_data_dir, tmp_path):
    """With own_anchor, the sampler's steps after its first take the skip's prior from its first estimate,
    and the own rows' training velocity goes through that anchored skip; the other rows keep the
    observation's prior."""
    n = 4
    tr = trainer(train_data_dir, tmp_path / "run", batch=4, p_own_estimate=0.5, own_steps=n, own_churn=0.0,
                 own_anchor=2.0)
    grid = timesteps(n).tolist()
    calls, trained = [], []
    ema_velocity, skip_velocity = tr.ema_velocity, tr.model.skip.velocity

    def ema_spy(x, t, *rest):
        v = ema_velocity(x, t, *rest)
        calls.append((x.clone(), rest[-1], v.clone()))
        return v

    def skip_spy(raw, x, t, obs, use_cond, anchor=None):
        trained.append((x.shape[0], anchor))
        return skip_velocity(raw, x, t, obs, use_cond, anchor)

    tr.ema_velocity, tr.model.skip.velocity = ema_spy, skip_spy
    for k in (1, 2, 3):
        calls.clear(), trained.clear()
        tr.train_step(tr.batch())
        assert len(calls) == k and calls[0][1] is None
        first = calls[0][0] - grid[0] * calls[0][2]  # the one-step estimate
        for _, anchor, _ in calls[1:]:
            assert torch.equal(anchor[0], first) and anchor[1] == 2.0
        # the own rows (the first two) on that anchor, the rest on the observation's prior
        assert [(b, a is None) for b, a in trained] == [(2, False), (2, True)]
        assert torch.equal(trained[0][1][0], first)
    with pytest.raises(ValueError, match="own_anchor"):
        trainer(train_data_dir, tmp_path / "a", p_own_estimate=0.5, own_anchor=2.0)
    with pytest.raises(ValueError, match="no skip"):
        trainer(train_data_dir, tmp_path / "b", p_own_estimate=0.5, own_steps=4, own_anchor=2.0, precondition="none")


def test_stochastic_own_states_train_beside_the_discriminators(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run", batch=4, p_own_estimate=0.25, own_steps=8, own_churn=0.3,
                 adv_weight=0.1, fm_weight=0.1, adv_warmup=1, adv_seconds=1.0, d_channels=4, t_one=0.5,
                 model={"source": "observation", "source_sigma": 0.5})
    for _ in range(3):
        assert torch.isfinite(tr.train_step(tr.batch()))


def test_own_steps_is_refused_where_it_means_nothing(train_data_dir, tmp_path):
    with pytest.raises(ValueError, match="at least 2 steps"):
        trainer(train_data_dir, tmp_path / "a", p_own_estimate=0.5, own_steps=1)
    with pytest.raises(ValueError, match="needs p_own_estimate"):
        trainer(train_data_dir, tmp_path / "b", own_steps=8)


def test_flow_path_targets_the_clean_latents_from_any_start():
    from restore.training.trainer import flow_path

    g = torch.Generator().manual_seed(0)
    x0, est, eps = (torch.randn(3, 5, 4, generator=g) for _ in range(3))
    t = torch.tensor([0.25, 0.5, 0.9])
    xt, v = flow_path(x0, est, eps, t)
    assert torch.allclose(xt - t[:, None, None] * v, x0, atol=1e-5)
    xt, v = flow_path(x0, x0, eps, t)
    assert torch.allclose(v, eps - x0) and torch.allclose(xt, (1 - t[:, None, None]) * x0 + t[:, None, None] * eps)


@pytest.mark.slow
def test_adversarial_terms_train_the_discriminators_log_and_resume_exactly(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run", adv_weight=0.5, fm_weight=0.5, adv_warmup=1, adv_seconds=1.0,
                 d_channels=4, t_one=0.5)
    d0 = [p.detach().clone() for p in tr.disc.parameters()]
    tr.train_step(tr.batch())
    assert all(not torch.equal(a, b) for a, b in zip(d0, tr.disc.parameters()))  # the discriminators learn
    assert set(tr.last_adv) == {"d_loss", "adv_loss", "fm_loss"} and all(torch.isfinite(v) for v in tr.last_adv.values())
    tr.save_checkpoint()
    saved = torch.load(tmp_path / "run" / "ckpt.pt", weights_only=False)["disc"]
    after = [tr.train_step(tr.batch()).item() for _ in range(2)]
    again = trainer(train_data_dir, tmp_path / "run", adv_weight=0.5, fm_weight=0.5, adv_warmup=1,
                    adv_seconds=1.0, d_channels=4, t_one=0.5)
    assert again.resume()
    assert all(torch.equal(again.disc.state_dict()[k], v) for k, v in saved.items())
    assert [again.train_step(again.batch()).item() for _ in range(2)] == pytest.approx(after, rel=1e-5)


@pytest.mark.slow
def test_the_adversarial_terms_reach_the_model(train_data_dir, tmp_path):
    plain = trainer(train_data_dir, tmp_path / "a", t_one=1.0)
    adv = trainer(train_data_dir, tmp_path / "b", t_one=1.0, adv_weight=1.0, fm_weight=1.0, adv_warmup=1,
                  adv_seconds=1.0, d_channels=4)
    plain.train_step(plain.batch())
    adv.train_step(adv.batch())  # same batch, noise and t (same seeds): only the objective differs
    moved = [not torch.allclose(a, b) for a, b in zip(plain.model.parameters(), adv.model.parameters())]
    assert any(moved)


@pytest.mark.slow
def test_the_discriminators_can_see_clean_speech_with_its_floor_lowered(train_data_dir, tmp_path):
    runs = [trainer(train_data_dir, tmp_path / str(d), t_one=1.0, adv_weight=1.0, adv_warmup=1, adv_seconds=1.0,
                    d_channels=4, adv_real_floor_db=d) for d in (0.0, 20.0)]
    for tr in runs:
        tr.train_step(tr.batch())  # same batch and draws: only what the discriminators call real differs
    assert runs[0].last_adv["d_loss"] != runs[1].last_adv["d_loss"]


def test_adversarial_terms_without_rows_at_t_one_are_refused(train_data_dir, tmp_path):
    with pytest.raises(ValueError, match="t_one"):
        trainer(train_data_dir, tmp_path / "run", adv_weight=0.1)
    with pytest.raises(ValueError, match="adv_t_min"):
        trainer(train_data_dir, tmp_path / "run", adv_weight=0.1, t_one=0.5, adv_t_min=1.5)


@pytest.fixture
def judged(monkeypatch):
    """The row weights each discriminator step is given (trainer_mod.discriminator_loss), in order."""
    seen = []
    real_loss = trainer_mod.discriminator_loss

    def spy(disc, real, fake, weight):
        seen.append(weight.clone())
        return real_loss(disc, real, fake, weight)

    monkeypatch.setattr(trainer_mod, "discriminator_loss", spy)
    return seen


def test_the_discriminators_judge_the_rows_from_adv_t_min_up(train_data_dir, tmp_path, monkeypatch, judged):
    """With adv_t_min below 1 the estimates of the later steps' flow times are judged too, and nothing
    needs to be drawn at t = 1; at 1 only the one-step sampler's rows are."""
    for t_min, t_one in ((1.0, 0.5), (0.3, 0.0)):
        tr = trainer(train_data_dir, tmp_path / str(t_min), adv_weight=0.5, adv_warmup=1, adv_seconds=1.0,
                     d_channels=4, t_one=t_one, adv_t_min=t_min)
        drawn = []
        monkeypatch.setattr(tr, "draw_t", lambda b, f=tr.draw_t: drawn.append(f(b)) or drawn[-1])
        tr.train_step(tr.batch())
        assert torch.equal(judged[-1], (drawn[-1] >= t_min).float())
    assert judged[-1].sum() > 0  # rows below t = 1 were judged


def test_adv_own_judges_the_samplers_own_states_too(train_data_dir, tmp_path, monkeypatch, judged):
    """With adv_own the own rows (here the sampler's states, below t = 1) are judged beside the rows at
    t >= adv_t_min; without it they are not."""
    for adv_own in (False, True):
        tr = trainer(train_data_dir, tmp_path / str(adv_own), batch=4, p_own_estimate=0.5, own_steps=4,
                     adv_weight=0.5, fm_weight=0.5, adv_warmup=1, adv_seconds=1.0, d_channels=4, t_one=0.5,
                     adv_own=adv_own)
        drawn = []
        monkeypatch.setattr(tr, "draw_t", lambda b, f=tr.draw_t: drawn.append(f(b)) or drawn[-1])
        assert torch.isfinite(tr.train_step(tr.batch()))
        rest = (drawn[-1][2:] >= 1.0).float()
        assert torch.equal(judged[-1][2:], rest)  # the other rows: those at t = 1, as before
        assert torch.equal(judged[-1][:2], torch.full((2,), float(adv_own)))  # the own rows at t = 3/4


def test_adv_own_is_refused_without_own_rows_or_discriminators(train_data_dir, tmp_path):
    with pytest.raises(ValueError, match="adv_own"):
        trainer(train_data_dir, tmp_path / "a", adv_weight=0.1, t_one=0.5, adv_own=True)
    with pytest.raises(ValueError, match="adv_own"):
        trainer(train_data_dir, tmp_path / "b", p_own_estimate=0.5, adv_own=True)


def test_train_py_keeps_the_mixture_of_the_model_it_continues(train_data_dir, tmp_path):
    """--init carries its damage mixture (info.degrade_config) into the run, setting by setting, and --config
    moves only what it names: a continued model is not silently put back on the defaults."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({**TINY_MODEL, "precondition": "obs_skip"})
    init = tmp_path / "init"
    mixture = {"p_clean": 0.37, "p_reverb": 0.11, "snr_db": [-3, 21]}
    weights.save(init, cfg, CodecConfig(scale=3.0), DiT(cfg, CodecConfig(scale=3.0)).state_dict(),
                 {"degrade_config": mixture}, dtype=torch.float32)
    run = subprocess.run([sys.executable, str(Path(__file__).resolve().parent.parent / "scripts" / "train.py"), "--data", str(train_data_dir),
                          "--out", str(tmp_path / "run"), "--init", str(init), "--device", "cpu", "--export-only",
                          "--config", json.dumps({"train": {"batch": 2, "window_seconds": 4.096},
                                                  "degrade": {"p_reverb": 0.5}})],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    got = weights.load(tmp_path / "run" / "export").info["degrade_config"]
    assert got["p_clean"] == 0.37 and got["snr_db"] == [-3, 21] and got["p_reverb"] == 0.5
    assert got["p_noise"] == DegradeConfig().p_noise  # what neither names keeps the default
