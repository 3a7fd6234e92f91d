"""scripts/finish_export.py: an export given its run name, init and totals from the init's config."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _folder(path, info, samplers=None):
    path.mkdir()
    cfg = {"format_version": 1, "model": {}, "codec": {}, "info": info}
    if samplers:
        cfg["samplers"] = samplers
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _finish(export, init, *extra):
    return subprocess.run([sys.executable, str(ROOT / "scripts/finish_export.py"), str(export), "--run", "r2",
                           "--init", str(init), *extra], capture_output=True, text=True)


def test_the_totals_are_the_inits_plus_the_runs_own_however_often_it_runs(tmp_path):
    init = _folder(tmp_path / "init", {"run": "r1-soup", "train_steps": 50, "total_train_steps": 1000,
                                       "total_train_seconds": 60.5}, {"flash": {"steps": 1, "strength": 0.5}})
    export = _folder(tmp_path / "export", {"train_steps": 200, "train_seconds": 12.25, "parameters": 7})
    for _ in range(2):
        assert _finish(export, init, "--how", "grown to 12 layers").returncode == 0
    cfg = json.loads((export / "config.json").read_text())
    assert cfg["info"] == {"train_steps": 200, "train_seconds": 12.25, "parameters": 7, "run": "r2",
                           "init": "r1-soup, grown to 12 layers (1,000 steps, 60.5 s)",
                           "total_train_steps": 1200, "total_train_seconds": 72.8}
    assert cfg["samplers"] == {"flash": {"steps": 1, "strength": 0.5}}


def test_an_init_without_a_run_name_or_an_export_without_steps_is_refused(tmp_path):
    nameless = _folder(tmp_path / "nameless", {"train_steps": 5})
    export = _folder(tmp_path / "export", {"train_steps": 200, "train_seconds": 12.0})
    out = _finish(export, nameless)
    assert out.returncode != 0 and "names no run" in out.stderr
    init = _folder(tmp_path / "init", {"run": "r1", "train_steps": 5, "train_seconds": 1.0})
    out = _finish(_folder(tmp_path / "odd", {"run": "x"}), init)
    assert out.returncode != 0 and "not an export" in out.stderr
    assert _finish(export, init).returncode == 0  # an init without totals: its own steps are the total
    assert json.loads((export / "config.json").read_text())["info"]["total_train_steps"] == 205
