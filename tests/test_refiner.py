"""The band refiner: it starts as the identity, the pipeline runs it on the sampler's result (each file on
its own frames where files share a window), and a model folder that declares one must carry it."""

import json

import numpy as np
import pytest
import soundfile as sf
import torch

from restore import weights
from restore.config import RefinerConfig
from restore.errors import InputError
from restore.model.refiner import Refiner
from restore.pipeline import post
from tests.conftest import speechlike

SR = 16000


def live_refiner(channels=4, seed=0) -> Refiner:
    torch.manual_seed(seed)
    r = Refiner(RefinerConfig(channels=channels, dilations=(1, 2)))
    torch.nn.init.normal_(r.out.weight, std=0.1)
    return r.eval().requires_grad_(False)


def test_a_new_refiner_is_the_identity():
    r = Refiner(RefinerConfig(channels=4))
    x, obs = torch.randn(2, 50, 514), torch.randn(2, 50, 514)
    assert torch.equal(r(x, obs), x)


def test_the_refiner_reads_both_the_estimate_and_the_observation():
    r = live_refiner()
    x, obs = torch.randn(1, 40, 514), torch.randn(1, 40, 514)
    y = r(x, obs)
    assert not torch.allclose(y, x)
    assert not torch.allclose(r(x, obs * 2), y)


def test_files_sharing_a_window_are_refined_each_as_alone():
    r = live_refiner()
    x, obs = torch.randn(1, 100, 514), torch.randn(1, 100, 514)
    out = post.refine(r, obs, x, [[(0, 40), (60, 100)]])
    assert torch.allclose(out[:, :40], r(x[:, :40], obs[:, :40]), atol=1e-6)
    assert torch.allclose(out[:, 60:], r(x[:, 60:], obs[:, 60:]), atol=1e-6)
    assert torch.equal(out[:, 40:60], x[:, 40:60])  # the gap between them is left as it was
    # a neighbour does not reach into a file's frames
    other = x.clone()
    other[:, 60:] = torch.randn(1, 40, 514)
    assert torch.equal(post.refine(r, obs, other, [[(0, 40), (60, 100)]])[:, :40], out[:, :40])


def with_refiner(src, dst, refiner: Refiner):
    files = weights.load(src)
    model = json.loads((src / "config.json").read_text())["model"]
    model["refiner"] = refiner.config.to_dict()
    state = {**files.state, **{f"refiner.{k}": v for k, v in refiner.state_dict().items()}}
    weights.save(dst, type(files.model).from_dict(model), files.codec, state, dtype=torch.float32)
    return dst


def restore(model, src, out):
    from typer.testing import CliRunner

    from restore.cli import app
    r = CliRunner().invoke(app, [str(src), "-o", str(out), "--model", str(model), "--sampler", "flash"])
    assert r.exit_code == 0, r.output
    return sf.read(out)[0]


def test_the_pipeline_runs_the_models_refiner(live_model, tmp_path):
    src = tmp_path / "in.wav"
    sf.write(src, speechlike(1.0, SR), SR)
    base = restore(live_model, src, tmp_path / "base.wav")
    same = restore(with_refiner(live_model, tmp_path / "zero", Refiner(RefinerConfig(channels=4))), src,
                   tmp_path / "zero.wav")
    assert np.allclose(same, base, atol=1e-6)  # an identity refiner changes nothing
    live = restore(with_refiner(live_model, tmp_path / "live", live_refiner()), src, tmp_path / "live.wav")
    assert live.shape == base.shape and np.linalg.norm(live - base) > 1e-3 * np.linalg.norm(base)


def test_a_model_that_declares_a_refiner_must_carry_it(live_model, tmp_path):
    folder = with_refiner(live_model, tmp_path / "m", live_refiner())
    files = weights.load(folder)
    files.state = {k: v for k, v in files.state.items() if not k.startswith("refiner.")}
    with pytest.raises(InputError, match="refiner"):
        weights.build_refiner(files)
    assert weights.build_refiner(weights.load(live_model)) is None
