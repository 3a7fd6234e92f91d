"""scripts/join_log.py: a run's log appended to a model's history, offset and marked."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _join(log, history, run, offset):
    return subprocess.run([sys.executable, str(ROOT / "scripts/join_log.py"), str(log), str(history), "--run", run,
                           "--init", "r0", "--offset", str(offset)], capture_output=True, text=True)


def test_a_run_is_appended_with_its_steps_offset_and_its_start_marked(tmp_path):
    history, log = tmp_path / "training_log.jsonl", tmp_path / "log.jsonl"
    _write(history, [{"event": "start", "step": 0, "run": "r0"}, {"step": 50, "loss": 1.0}])
    _write(log, [{"event": "start", "step": 0}, {"step": 50, "loss": 0.5}, {"step": 100, "val_loss": 0.4}])
    assert _join(log, history, "r1", 50).returncode == 0
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    assert rows[:2] == [{"event": "start", "step": 0, "run": "r0"}, {"step": 50, "loss": 1.0}]
    assert rows[2] == {"event": "start", "step": 50, "run": "r1", "init": "r0"}
    assert [r["step"] for r in rows[3:]] == [100, 150]
    again = _join(log, history, "r1", 50)  # joined twice by mistake: refused, nothing written
    assert again.returncode != 0 and "already holds" in again.stderr
    assert len(history.read_text().splitlines()) == 5


def test_a_log_without_a_start_event_is_refused(tmp_path):
    log = tmp_path / "log.jsonl"
    _write(log, [{"step": 50, "loss": 0.5}])
    out = _join(log, tmp_path / "h.jsonl", "r1", 0)
    assert out.returncode != 0 and "start event" in out.stderr and not (tmp_path / "h.jsonl").exists()
