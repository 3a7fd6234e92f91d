"""Weight averaging of runs continued from one model (restore/training/average.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from restore import weights
from restore.errors import InputError
from restore.training.average import average, save_average

ROOT = Path(__file__).resolve().parent.parent


def _variant(tiny_model, folder, seed, run):
    """The tiny model with its weights moved by a seeded amount, as a separate run would move them."""
    files = weights.load(tiny_model)
    g = torch.Generator().manual_seed(seed)
    state = {k: v + 0.1 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
             for k, v in files.state.items()}
    weights.save(folder, files.model, files.codec, state, {"run": run, "train_steps": 10 * seed, "parameters": 7},
                 dtype=torch.float32, samplers={"flash": {"steps": 1, "strength": 0.5}})
    return folder


def test_the_average_is_the_share_weighted_mean_and_loads_as_a_model(tiny_model, tmp_path):
    a = _variant(tiny_model, tmp_path / "a", 1, "ra")
    b = _variant(tiny_model, tmp_path / "b", 2, "rb")
    sa, sb = weights.load(a).state, weights.load(b).state
    got = average([a, b], [0.25, 0.75])
    for k in sa:
        assert torch.allclose(got.state[k], 0.25 * sa[k] + 0.75 * sb[k], atol=1e-6), k
    assert not torch.allclose(got.state["out.weight"], sa["out.weight"])
    assert [s["run"] for s in got.info["averaged"]] == ["ra", "rb"]
    assert got.info["parameters"] == 7 and "run" not in got.info  # what they agree on, not what one says
    save_average([a, b], tmp_path / "mean", info={"run": "soup"})
    saved = weights.load(tmp_path / "mean")
    assert saved.info["run"] == "soup" and saved.samplers == {"flash": {"steps": 1, "strength": 0.5}}
    for k in sa:  # stored as float16, like an export
        assert torch.allclose(saved.state[k].float(), (sa[k] + sb[k]) / 2, atol=2e-3), k
    weights.build_model(saved)  # every name matches the architecture


def test_models_that_cannot_be_averaged_are_refused(tiny_model, tmp_path):
    a = _variant(tiny_model, tmp_path / "a", 1, "ra")
    with pytest.raises(InputError, match="at least two"):
        average([a])
    with pytest.raises(InputError, match="summing to 1"):
        average([a, a], [0.5, 0.6])
    files = weights.load(a)
    other = dict(files.model.to_dict(), width=files.model.width * 2)
    cfg = json.loads((a / "config.json").read_text())
    (tmp_path / "wide").mkdir()
    for p in a.glob("model-*"):
        (tmp_path / "wide" / p.name).write_bytes(p.read_bytes())
    (tmp_path / "wide" / "config.json").write_text(json.dumps(dict(cfg, model=other)))
    with pytest.raises(InputError, match="architecture"):
        average([a, tmp_path / "wide"])


@pytest.mark.slow
def test_the_script_writes_the_average_and_will_not_overwrite_a_source(tiny_model, tmp_path):
    a = _variant(tiny_model, tmp_path / "a", 1, "ra")
    b = _variant(tiny_model, tmp_path / "b", 2, "rb")
    script = str(ROOT / "scripts" / "average_models.py")
    out = subprocess.run([sys.executable, script, str(a), str(b), "--out", str(tmp_path / "m"),
                          "--info", '{"run": "soup"}'], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert weights.load(tmp_path / "m").info["run"] == "soup"
    refused = subprocess.run([sys.executable, script, str(a), str(b), "--out", str(a)], capture_output=True, text=True)
    assert refused.returncode != 0 and "must not be one of" in refused.stderr
    assert weights.load(a).info["run"] == "ra"
