"""A run's model packed as its 8-bit move from its start, and rebuilt (restore/training/delta.py)."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from restore import weights
from restore.errors import InputError
from restore.training.delta import pack, unpack

ROOT = Path(__file__).resolve().parent.parent


def _run_from(start, folder, seed, size=0.01):
    """`start` moved by a seeded fine-tune-sized step, saved in float16 as exports are."""
    files = weights.load(start)
    g = torch.Generator().manual_seed(seed)
    state = {k: v + size * v.abs().mean() * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
             for k, v in files.state.items()}
    weights.save(folder, files.model, files.codec, state, {"run": f"r{seed}", "train_steps": 123},
                 samplers={"flash": {"steps": 1, "strength": 1.2}})
    return folder


@pytest.fixture()
def start(tiny_model, tmp_path):
    files = weights.load(tiny_model)  # float32 weights, saved as a float16 start like the shipped model
    weights.save(tmp_path / "start", files.model, files.codec, files.state, {"run": "start"})
    return tmp_path / "start"


def test_unpacked_model_is_the_run_within_the_quantisation_step(start, tmp_path):
    run = _run_from(start, tmp_path / "run", 1)
    paths = pack(run, start, tmp_path / "packed")
    report = unpack(tmp_path / "packed", start, tmp_path / "back")
    want, got, base = weights.load(run), weights.load(tmp_path / "back"), weights.load(start)
    assert got.info == want.info and got.samplers == want.samplers and got.model == want.model
    moved = 0.0
    for k, w in want.state.items():
        assert got.state[k].dtype == w.dtype
        err = (got.state[k].float() - w.float()).abs().max().item()
        ulp = torch.finfo(torch.float16).eps * w.float().abs().max().item()
        assert err <= report["max_error"] + ulp, k
        moved = max(moved, (w.float() - base.state[k].float()).abs().max().item())
    assert report["max_error"] <= moved / 254 * (1 + 1e-6)
    packed = sum(p.stat().st_size for p in paths)
    full = sum(p.stat().st_size for p in Path(run).glob("model-*.safetensors"))
    assert packed < 0.7 * full  # int8 and a scale per row against float16


def test_a_model_that_did_not_move_comes_back_exactly(start, tmp_path):
    pack(start, start, tmp_path / "packed")
    unpack(tmp_path / "packed", start, tmp_path / "back")
    a, b = weights.load(start).state, weights.load(tmp_path / "back").state
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_unpacking_onto_another_start_is_refused(start, tmp_path):
    run = _run_from(start, tmp_path / "run", 1)
    other = _run_from(start, tmp_path / "other", 2, size=1e-3)
    pack(run, start, tmp_path / "packed")
    with pytest.raises(InputError, match="other starting weights"):
        unpack(tmp_path / "packed", other, tmp_path / "back")


def test_an_incomplete_copy_is_refused(start, tmp_path):
    run = _run_from(start, tmp_path / "run", 1)
    pack(run, start, tmp_path / "packed")
    meta = json.loads((tmp_path / "packed" / "delta.json").read_text())
    meta["dtypes"]["not.a.tensor"] = "float16"
    (tmp_path / "packed" / "delta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="missing"):
        unpack(tmp_path / "packed", start, tmp_path / "back")


def test_models_of_other_shapes_are_refused(start, tmp_path):
    files = weights.load(start)
    wider = {k: torch.cat([v, v]) if k == "x_in.bias" else v for k, v in files.state.items()}
    weights.save(tmp_path / "other", files.model, files.codec, wider)
    with pytest.raises(InputError, match="different parameters"):
        pack(tmp_path / "other", start, tmp_path / "packed")


def test_a_run_continued_into_a_bridge_or_a_local_skip_packs_and_comes_back_with_its_config(start, tmp_path):
    files = weights.load(_run_from(start, tmp_path / "run", 4))
    bridge = dataclasses.replace(files.model, source="observation", source_sigma=0.5, skip_local=1.0)
    weights.save(tmp_path / "bridge", bridge, files.codec, files.state, files.info)
    pack(tmp_path / "bridge", start, tmp_path / "packed")
    unpack(tmp_path / "packed", start, tmp_path / "back")
    back = weights.load(tmp_path / "back")
    assert back.model == bridge and weights.load(start).model.source == "noise"
    assert back.model.skip_local == 1.0 and weights.load(start).model.skip_local == 0.0
    deeper = dataclasses.replace(files.model, layers=files.model.layers + 1)  # still refused
    weights.save(tmp_path / "deeper", deeper, files.codec, files.state)
    with pytest.raises(InputError, match="different architectures"):
        pack(tmp_path / "deeper", start, tmp_path / "p2")


def test_script_round_trip(start, tmp_path):
    run = _run_from(start, tmp_path / "run", 3)
    script = str(ROOT / "scripts" / "model_delta.py")
    out = subprocess.run([sys.executable, script, "pack", str(run), "--init", str(start), "--out",
                          str(tmp_path / "packed")], capture_output=True, text=True, check=True).stdout
    assert "wrote" in out and "MiB" in out
    out = subprocess.run([sys.executable, script, "unpack", str(tmp_path / "packed"), "--init", str(start),
                          "--out", str(tmp_path / "back")], capture_output=True, text=True, check=True).stdout
    assert "within" in out
    weights.build_model(weights.load(tmp_path / "back"))  # a model folder like any other
    bad = subprocess.run([sys.executable, script, "unpack", str(tmp_path / "packed"), "--init", str(run),
                          "--out", str(tmp_path / "b2")], capture_output=True, text=True)
    assert bad.returncode != 0 and "other starting weights" in bad.stderr
