"""Depth growth (restore/training/grow.py): the deeper model computes what the trained one did, and
training reaches the inserted blocks."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from restore import text as text_mod
from restore import weights
from restore.codec import STFTCodec
from restore.config import CodecConfig, ModelConfig
from restore.errors import InputError
from restore.model.dit import DiT
from restore.training.grow import copy_after, deepen
from tests.conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parent.parent
T = 24  # frames


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny model with every parameter non-zero (as training leaves them), saved as a model folder."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict(TINY_MODEL)
    model = DiT(cfg, CodecConfig(scale=3.0))
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05)
    folder = tmp_path_factory.mktemp("trained")
    weights.save(folder, cfg, CodecConfig(scale=3.0), model.state_dict(), {"run": "r0"}, dtype=torch.float32,
                 samplers={"flash": {"steps": 1, "strength": 0.5}})
    return folder


def _velocity(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    deg = torch.randn(3, T * 256, generator=g) * 0.05
    obs = STFTCodec(CodecConfig(scale=3.0)).encode(deg)
    ids, mask = text_mod.batch(["some words", None, "more"], 32)
    x, t = torch.randn(3, T, 514, generator=g), torch.tensor([0.2, 0.6, 1.0])
    return model(x, t, deg, obs, torch.tensor([True, True, False]), ids, mask)


def test_copies_spread_over_the_depth_and_always_follow_the_last_block():
    assert copy_after(8, 12) == [1, 3, 5, 7]
    assert copy_after(8, 10) == [3, 7]
    assert copy_after(8, 16) == list(range(8))
    assert copy_after(2, 5) == [0, 1, 1]  # more than doubled: a block copied twice


@pytest.mark.parametrize("layers", [3, 5])
def test_the_grown_model_computes_what_the_trained_one_did(trained, layers):
    files = weights.load(trained)
    grown = deepen(files, layers)
    assert grown.model.layers == layers and grown.model.width == files.model.width
    assert grown.info["run"] == "r0" and grown.info["grown"]["from_layers"] == 2
    assert grown.samplers == files.samplers
    old, new = weights.build_model(files).eval(), weights.build_model(grown).eval()  # strict: names match
    with torch.no_grad():
        assert torch.allclose(_velocity(old), _velocity(new), atol=1e-6)
    # the copies are their source block, but for the three projections that add to the residual stream
    src = copy_after(2, layers)[0]
    assert torch.equal(grown.state[f"blocks.{src + 1}.attn.q_proj.weight"],
                       files.state[f"blocks.{src}.attn.q_proj.weight"])
    assert grown.state[f"blocks.{src + 1}.mlp.down_proj.weight"].abs().max() == 0


def test_training_reaches_the_inserted_blocks_at_once(trained):
    grown = weights.build_model(deepen(weights.load(trained), 3)).train()
    _velocity(grown).square().mean().backward()
    assert copy_after(2, 3) == [1]
    copy = grown.blocks[2]  # 2 -> 3: the copy of block 1, after it
    for proj in (copy.attn.o_proj, copy.mlp.down_proj):
        assert proj.weight.grad.abs().max() > 0  # what the copy adds moves first
    assert copy.attn.q_proj.weight.grad.abs().max() == 0  # and the rest once that has moved


def test_growing_to_no_more_layers_is_refused(trained):
    with pytest.raises(InputError, match="more"):
        deepen(weights.load(trained), 2)


def test_the_script_writes_a_model_folder_that_train_py_starts_from(trained, train_data_dir, tmp_path):
    out = tmp_path / "grown"
    run = [sys.executable, str(ROOT / "scripts/grow_model.py"), str(trained), "--layers", "4", "--out", str(out),
           "--info", '{"run": "r0-deep"}']
    assert subprocess.run(run, capture_output=True, text=True).returncode == 0
    files = weights.load(out)
    assert files.model.layers == 4 and files.info["run"] == "r0-deep"
    # train.py takes the depth (and the rest of the model settings) from --init
    export = subprocess.run([sys.executable, str(ROOT / "scripts/train.py"), "--data", str(train_data_dir),
                             "--out", str(tmp_path / "run"), "--init", str(out), "--device", "cpu",
                             "--config", '{"train": {"batch": 2, "window_seconds": 4.096}}', "--export-only"],
                            capture_output=True, text=True)
    assert export.returncode == 0, export.stderr
    again = weights.load(tmp_path / "run" / "export")
    assert again.model == files.model
    for k, v in files.state.items():
        assert torch.equal(again.state[k], v), k
    same = subprocess.run(run[:-2] + ["--out", str(trained)], capture_output=True, text=True)
    assert same.returncode != 0 and "must not be" in same.stderr
