"""A run stopped from outside (issue 48): SIGTERM is handled as Ctrl-C is (exit 143, one line, the file in
progress dropped with its temporary files, finished outputs kept, a worker process stopped and its shared
memory freed); what SIGKILL leaves, the next run removes. Each test runs the command in a subprocess whose
sampler waits, once a chosen window is sampled, for the signal."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from restore.cli import app
from tests.conftest import leftovers
from tests.test_cli import make_folder, tree

ROOT = Path(__file__).resolve().parent.parent

# The command, its sampler made to wait after the window numbered argv[2] (1-based) until a signal ends it;
# argv[1] is a file it creates then.
CHILD = r"""
import sys, time
from pathlib import Path
from restore.pipeline.restorer import Restorer

marker, at = Path(sys.argv[1]), int(sys.argv[2])
sample, calls = Restorer._sample, []

def waiting(self, *args, **kwargs):
    out = sample(self, *args, **kwargs)
    calls.append(1)
    if len(calls) == at:
        marker.touch()
        time.sleep(120)
    return out

Restorer._sample = waiting
from restore.cli import app
app(sys.argv[3:], prog_name="restore")
"""


def start(tmp_path, at, *args):
    marker = tmp_path / "waiting"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker), str(at), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    deadline = time.monotonic() + 120
    while not marker.exists():  # an event to wait for, not a timing: the limit only ends a broken run
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run ended before its window was sampled: {proc.communicate()}")
        time.sleep(0.05)
    return proc


def stop(proc, sig):
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out + err


@pytest.mark.slow
def test_sigterm_mid_folder_keeps_finished_outputs_and_nothing_else(tiny_model, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    names = make_folder(src)
    # a transcript keeps a.wav out of the window that c.ogg would share with it (short files are packed by
    # rows and transcript): three windows, a, b, c; at the third, a.wav is written (decodes run one window
    # behind sampling), sub/b.flac is not
    (src / "a.txt").write_text("a transcript for a")
    proc = start(tmp_path, 3, src, "-o", out, "--model", tiny_model, "--sampler", "flash", "--steps", "1")
    code, output = stop(proc, signal.SIGTERM)
    assert code == 143, output
    assert output.strip() == ("terminated: finished outputs are kept, unfinished ones dropped; run the same "
                              "command again to resume")
    assert tree(out) == ["a.wav", "restore-report.json"]  # no partial output, no temporary file
    assert [e["status"] for e in json.loads((out / "restore-report.json").read_text())["files"]] == ["restored"]
    result = CliRunner().invoke(app, [str(src), "-o", str(out), "--model", str(tiny_model), "--sampler", "flash",
                                      "--steps", "1"])
    assert result.exit_code == 0 and "2 restored, 1 skipped, 0 failed" in result.output
    assert tree(out) == sorted(names + ["restore-report.json"])


@pytest.mark.slow
def test_sigkill_leaves_temporary_files_that_the_next_run_removes(tiny_model, tmp_path, wav):
    src = wav("in.wav", seconds=2.0)
    out = tmp_path / "out" / "in.restored.wav"
    proc = start(tmp_path, 1, src, "-o", out, "--model", tiny_model, "--sampler", "flash", "--steps", "1")
    code, _ = stop(proc, signal.SIGKILL)
    assert code == -signal.SIGKILL
    left = leftovers(out.parent)
    # the output's temporary file (a short file's levelled audio is held in memory, with no float copy)
    assert len(left) == 1 and all(f".{proc.pid}." in name for name in left)
    result = CliRunner().invoke(app, [str(src), "-o", str(out), "--model", str(tiny_model), "--sampler", "flash",
                                      "--steps", "1"])
    assert result.exit_code == 0, result.output
    assert f"removed 1 temporary file(s) that an interrupted run left in {out.parent}" in result.output
    assert tree(out.parent) == ["in.restored.wav"]


@pytest.mark.slow
def test_sigterm_with_a_worker_process_frees_its_shared_memory(tiny_model, tmp_path, wav):
    """The split plan: a worker process and shared memory, which a killed main process leaked."""
    src = wav("in.wav", seconds=2.0)
    out = tmp_path / "out.wav"
    proc = start(tmp_path, 1, src, "-o", out, "--model", tiny_model, "--plan", "split", "--mlp-share", "0.5",
                 "--sampler", "flash", "--steps", "2")
    code, output = stop(proc, signal.SIGTERM)
    assert code == 143, output
    assert "leaked" not in output and "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert tree(tmp_path) == ["in.wav", "waiting"]
