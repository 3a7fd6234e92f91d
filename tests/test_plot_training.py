"""scripts/plot_training.py: a joined log is split into its runs, side-by-side runs included."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")  # an eval extra

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("plot_training", ROOT / "scripts" / "plot_training.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(name, start, n):
    rows = [{"event": "start", "step": start, "run": name}]
    rows += [{"step": start + 50 * k, "loss": 1.0 / k} for k in range(1, n + 1)]
    rows += [{"step": start + 50 * n, "val_loss": 0.5, "val_x0_err_t1": 0.4, "obs_x0_err": 0.7,
              "val_si_sdr": 5.0, "input_si_sdr": 4.0}]
    return rows


def test_a_joined_log_splits_at_its_starts_and_plots(tmp_path):
    mod = _module()
    rows = _run("r8", 0, 4) + _run("r9", 200, 3) + _run("r9-clean", 200, 3)  # the last two side by side
    parts = mod.runs(rows)
    assert [name for name, _ in parts] == ["r8", "r9", "r9-clean"]
    assert [len(p) for _, p in parts] == [6, 5, 5]
    assert all(p[0].get("event") == "start" for _, p in parts)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mod.main(str(log), str(tmp_path / "plot.png"))
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def test_a_log_without_start_events_is_one_run():
    rows = [{"step": 50, "loss": 1.0}, {"step": 100, "loss": 0.9}]
    assert [len(p) for _, p in _module().runs(rows)] == [2]
