"""Growth (restore/training/grow.py): the deeper or wider model computes what the trained one did, and
training reaches the inserted blocks and the new channels."""

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
from restore.training.grow import copy_after, deepen, widen
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


@pytest.mark.slow
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
        assert torch.equal(again.state[k], v.to(again.state[k].dtype)), k  # the grown folder is float32
    same = subprocess.run(run[:-2] + ["--out", str(trained)], capture_output=True, text=True)
    assert same.returncode != 0 and "must not be" in same.stderr


@pytest.mark.parametrize("width,intermediate", [(96, None), (128, 320)])
def test_the_widened_model_computes_what_the_trained_one_did(trained, width, intermediate):
    files = weights.load(trained)
    wide = widen(files, width, intermediate)
    m = wide.model
    assert (m.width, m.heads, m.head_dim) == (width, width // 32, 32) and m.layers == files.model.layers
    assert m.intermediate == (intermediate or 64 * round(128 * width / 64 / 64))
    assert wide.info["widened"] == {"from_width": 64, "width": width, "from_intermediate": 128,
                                    "intermediate": m.intermediate}
    assert wide.samplers == files.samplers
    old, new = weights.build_model(files).eval(), weights.build_model(wide).eval()  # strict: shapes match
    with torch.no_grad():
        a, b = _velocity(old), _velocity(new)
    assert ((a - b).norm() / a.norm()) < 1e-5
    # the new channels stay zero through the trunk: nothing writes into them yet
    assert wide.state["x_in.weight"][64:].abs().max() == 0 and wide.state["c_in.weight"][64:].abs().max() == 0
    assert wide.state["blocks.0.attn.o_proj.weight"][64:].abs().max() == 0
    assert wide.state["blocks.0.attn.o_proj.weight"][:, 64:].abs().max() == 0  # new heads not added
    assert wide.state["blocks.1.mlp.down_proj.weight"][64:].abs().max() == 0


def test_training_reaches_the_new_channels_at_once(trained):
    wide = weights.build_model(widen(weights.load(trained), 128)).train()
    _velocity(wide).square().mean().backward()
    blk = wide.blocks[0]
    for p in (wide.x_in.weight, wide.c_in.weight, blk.attn.o_proj.weight, blk.mlp.down_proj.weight):
        assert p.grad[64:].abs().max() > 0  # what writes into the new channels moves first
    assert blk.attn.o_proj.weight.grad[:, 64:].abs().max() > 0  # and what adds the new heads' outputs
    assert blk.ada.grad[2, 64:].abs().max() == 0  # the new channels' gates once those writes have moved


def test_widening_needs_a_larger_multiple_of_the_head_size(trained):
    files = weights.load(trained)
    for bad in (64, 48, 100):
        with pytest.raises(InputError, match="multiple of 32"):
            widen(files, bad)
    with pytest.raises(InputError, match="shrink"):
        widen(files, 128, 64)


@pytest.mark.slow
def test_the_script_widens_and_deepens_into_a_folder_train_py_starts_from(trained, train_data_dir, tmp_path):
    out = tmp_path / "wide"
    run = [sys.executable, str(ROOT / "scripts/grow_model.py"), str(trained), "--layers", "3", "--width", "96",
           "--out", str(out)]
    done = subprocess.run(run, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    files = weights.load(out)
    assert (files.model.layers, files.model.width, files.model.heads) == (3, 96, 3)
    assert all(t.dtype == torch.float32 for t in files.state.values())
    old = weights.build_model(weights.load(trained)).eval()
    with torch.no_grad():
        a, b = _velocity(old), _velocity(weights.build_model(files).eval())
    assert ((a - b).norm() / a.norm()) < 1e-5
    export = subprocess.run([sys.executable, str(ROOT / "scripts/train.py"), "--data", str(train_data_dir),
                             "--out", str(tmp_path / "run"), "--init", str(out), "--device", "cpu",
                             "--config", '{"train": {"batch": 2, "window_seconds": 4.096}}', "--export-only"],
                            capture_output=True, text=True)
    assert export.returncode == 0, export.stderr
    assert weights.load(tmp_path / "run" / "export").model == files.model
    nothing = subprocess.run(run[:3] + ["--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert nothing.returncode != 0 and "--layers, --width" in nothing.stderr
