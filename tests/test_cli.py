"""The command line (typer's CliRunner, in process): file and folder runs, resuming, reports, and every
bad input of issue 2: one sentence naming the file and the problem, exit 2 (usage) or 1 (failure), no
traceback, nothing left behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from tests.conftest import speechlike
from restore import api
from restore.cli import app
from restore.pipeline.restorer import Restorer

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny-model ops are too small for threads to pay (and two threads crawl when a core is busy)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def cli(tiny_model):
    def invoke(*args, fast=True):
        extra = ["--model", str(tiny_model)] + (["--sampler", "flash", "--steps", "1"] if fast else [])
        return runner.invoke(app, [str(a) for a in args] + extra)
    return invoke


def put(path, seconds=1.0, sr=16000, channels=1, data=None, subtype=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    if data is None:
        data = speechlike(seconds, sr)
        if channels > 1:
            data = np.stack([data * (1 - 0.1 * c) for c in range(channels)], axis=1)
    sf.write(path, data, sr, subtype=subtype)
    return path


def tree(folder):
    """Every file under `folder`, relative, hidden ones included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def mtimes(folder):
    return {p: (folder / p).stat().st_mtime_ns for p in tree(folder)}


def assert_clean_error(result, path, problem, code):
    """One line, naming the file and the problem; the right exit code; no traceback."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and str(path) in lines[0] and problem in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


def test_version():
    from restore import __version__
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"restore {__version__}"


def test_choices_come_from_the_library():
    from restore.engines.plan import PLANS
    from restore.options import SAMPLERS
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert "|".join(SAMPLERS) in result.output and "|".join(PLANS) in result.output


# ---- single files ----

def test_single_file(cli, tmp_path):
    src = put(tmp_path / "in.wav", 2.0, sr=44100, channels=2)
    result = cli(src, "-o", tmp_path / "out" / "restored.flac")
    assert result.exit_code == 0, result.output
    assert f"restored {src} -> {tmp_path / 'out' / 'restored.flac'}" in result.output
    info = sf.info(str(tmp_path / "out" / "restored.flac"))
    assert (info.format, info.samplerate, info.channels, info.frames) == ("FLAC", 44100, 2, 2 * 44100)
    assert tree(tmp_path) == ["in.wav", "out/restored.flac"]


def test_strength_reaches_the_sampler_and_the_report(cli, tmp_path):
    src = put(tmp_path / "in.wav", 1.0)
    result = cli(src, "-o", tmp_path / "out.wav", "--strength", "0.5", "--report", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    rep = json.loads((tmp_path / "r.json").read_text())["files"][0]
    assert rep["sampler"]["strength"] == 0.5
    bad = cli(src, "-o", tmp_path / "out2.wav", "--strength", "-1")
    assert bad.exit_code != 0 and "between 0 and 2" in bad.output and not (tmp_path / "out2.wav").exists()


def test_shifts_reach_the_sampler_and_the_report(cli, tmp_path):
    src = put(tmp_path / "in.wav", 1.0)
    result = cli(src, "-o", tmp_path / "out.wav", "--shifts", "3", "--report", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["files"][0]["sampler"]["shifts"] == 3
    bad = cli(src, "-o", tmp_path / "out2.wav", "--shifts", "0")
    assert bad.exit_code != 0 and "shifts must be at least 1" in bad.output and not (tmp_path / "out2.wav").exists()


def test_level_reaches_the_writer_and_the_report_in_folder_runs(cli, tmp_path):
    (tmp_path / "in").mkdir()
    put(tmp_path / "in" / "a.wav", 1.0)
    result = cli(tmp_path / "in", "-o", tmp_path / "out", "--level", "model")
    assert result.exit_code == 0, result.output
    rep = json.loads((tmp_path / "out" / "restore-report.json").read_text())["files"][0]
    assert rep["level"] == "model" and rep["level_gain_db"] is None
    levelled = cli(tmp_path / "in", "-o", tmp_path / "out2")
    rep = json.loads((tmp_path / "out2" / "restore-report.json").read_text())["files"][0]
    assert levelled.exit_code == 0 and rep["level"] == "input" and isinstance(rep["level_gain_db"], float)
    bad = cli(tmp_path / "in", "-o", tmp_path / "out3", "--level", "loud")
    assert bad.exit_code != 0 and not (tmp_path / "out3").exists()


def test_single_file_default_output_and_report(cli, tmp_path):
    src = put(tmp_path / "talk.wav")
    (tmp_path / "talk.txt").write_text("hello there")
    result = cli(src, "--report", tmp_path / "rep.json", "--sample-rate", "22050", "--seed", "3")
    assert result.exit_code == 0, result.output
    assert sf.info(str(tmp_path / "talk.restored.wav")).samplerate == 22050
    rep = json.loads((tmp_path / "rep.json").read_text())
    (entry,) = rep["files"]
    assert entry["status"] == "restored" and entry["transcript"] == "sidecar" and entry["seed"] == 3
    assert entry["sample_rate_out"] == 22050 and entry["output"] == str(tmp_path / "talk.restored.wav")


def test_single_file_existing_output(cli, tmp_path):
    src = put(tmp_path / "in.wav")
    out = put(tmp_path / "out.wav", 0.7, data=np.full(11200, 0.25, np.float32))
    before = out.read_bytes()
    assert_clean_error(cli(src, "-o", out), out, "already exists", 2)
    assert out.read_bytes() == before
    assert cli(src, "-o", out, "--overwrite").exit_code == 0
    assert out.read_bytes() != before
    assert tree(tmp_path) == ["in.wav", "out.wav"]


def test_no_progress_when_piped(cli, tmp_path):
    result = cli(put(tmp_path / "in.wav", 2.0), "-o", tmp_path / "out.wav", "--steps", "3", fast=False)
    assert result.exit_code == 0, result.output
    assert "\r" not in result.output and "window" not in result.output and "step" not in result.output


def test_progress_line_on_a_terminal(capsys):
    line = api.ProgressLine(True, files=2)
    line(api.Progress("a/b.wav", 0, 2, 3, 4))
    line.end()
    err = capsys.readouterr().err
    assert "b.wav" in err and "window 1/2" in err and "step 4/4" in err and "[0/2 done]" in err
    api.ProgressLine(False)(api.Progress("a/b.wav", 0, 2, 3, 4))
    assert capsys.readouterr().err == ""


# ---- every bad input ----

def test_missing_file(cli, tmp_path):
    missing = tmp_path / "nothing.wav"
    assert_clean_error(cli(missing, "-o", tmp_path / "out.wav"), missing, "no such file", 2)
    assert tree(tmp_path) == []


def test_folder_without_audio(cli, tmp_path):
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "readme.txt").write_text("no audio here")
    assert_clean_error(cli(folder, "-o", tmp_path / "out"), folder, "holds no audio", 2)
    assert not (tmp_path / "out").exists()


def _bad_inputs(tmp_path):
    """name -> (path, problem) for every input that must be refused."""
    bad = {}
    p = tmp_path / "text.wav"
    p.write_text("this is not audio at all\n" * 40)
    bad["not audio"] = (p, "not a readable audio file")
    p = tmp_path / "empty.wav"
    p.write_bytes(b"")
    bad["0 bytes"] = (p, "empty (0 bytes)")
    bad["zero length"] = (put(tmp_path / "zero.wav", data=np.zeros((0, 1), np.float32)), "zero length")
    bad["short"] = (put(tmp_path / "short.wav", 0.3), "0.30 s long; at least 0.5 s")
    x = speechlike(1.0, 16000)
    x[5000] = np.nan
    bad["nan"] = (put(tmp_path / "nan.wav", data=x, subtype="FLOAT"), "NaN or infinite")
    x = speechlike(1.0, 16000)
    x[5000] = np.inf
    bad["inf"] = (put(tmp_path / "inf.wav", data=x, subtype="FLOAT"), "NaN or infinite")
    bad["silent"] = (put(tmp_path / "silent.wav", data=np.zeros(16000, np.float32)), "silent")
    return bad


@pytest.mark.parametrize("case", ["not audio", "0 bytes", "zero length", "short", "nan", "inf", "silent"])
def test_bad_input_file(cli, tmp_path, case):
    src, problem = _bad_inputs(tmp_path)[case]
    before = tree(tmp_path)
    out = tmp_path / "out" / "restored.wav"
    assert_clean_error(cli(src, "-o", out), src, problem, 1)
    assert tree(tmp_path) == before  # no output, no temporary file
    assert not out.parent.exists() or tree(out.parent) == []


def test_bad_input_with_debug_shows_traceback(cli, tmp_path):
    src, _ = _bad_inputs(tmp_path)["nan"]
    result = cli(src, "-o", tmp_path / "out.wav", "--debug")
    assert result.exit_code == 1 and "Traceback" in result.output and "NaN or infinite" in result.output


def test_unsupported_output_extension(cli, tmp_path):
    src = put(tmp_path / "in.wav")
    out = tmp_path / "out.xyz"
    assert_clean_error(cli(src, "-o", out), out, "cannot write '.xyz'", 2)
    assert tree(tmp_path) == ["in.wav"]


def test_output_equal_to_input(cli, tmp_path):
    src = put(tmp_path / "in.wav")
    before = src.read_bytes()
    for out in (src, tmp_path / "." / "in.wav"):
        assert_clean_error(cli(src, "-o", out, "--overwrite"), out, "is the input file", 2)
    assert src.read_bytes() == before and tree(tmp_path) == ["in.wav"]


def test_output_parent_is_a_file(cli, tmp_path):
    src = put(tmp_path / "in.wav")
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile" / "out.wav", tmp_path / "afile" / "sub" / "out.wav"):
        assert_clean_error(cli(src, "-o", out), out, "is a file, not a folder", 2)
    assert tree(tmp_path) == ["afile", "in.wav"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_no_write_permission(cli, tmp_path):
    src = put(tmp_path / "in.wav")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert_clean_error(cli(src, "-o", ro / "out.wav"), ro / "out.wav", "no permission", 1)
        assert tree(ro) == []
    finally:
        ro.chmod(0o755)


def test_no_write_permission_simulated(cli, tmp_path, monkeypatch):
    """The same check for a root run (root may write anywhere, so the refusal is simulated)."""
    src = put(tmp_path / "in.wav")
    ro = tmp_path / "ro"
    ro.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(ro) else access(p, mode, **kw))
    for out in (ro / "out.wav", ro / "new" / "sub" / "out.wav"):
        assert_clean_error(cli(src, "-o", out), out, f"no permission to write in {ro}", 1)
    assert tree(tmp_path) == ["in.wav"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may read anything")
def test_unreadable_input(cli, tmp_path):
    src = put(tmp_path / "in.wav")
    src.chmod(0)
    try:
        assert_clean_error(cli(src, "-o", tmp_path / "out.wav"), src, "permission denied", 1)
    finally:
        src.chmod(0o644)


def test_unwritable_format_for_the_rate(cli, tmp_path):
    """Checked only when the writer opens (e.g. MP3 tops out at 48 kHz): still one clean sentence."""
    src = put(tmp_path / "in.wav")
    out = tmp_path / "out.mp3"
    if ".mp3" not in api.audio.WRITE_FORMATS:
        pytest.skip("libsndfile here does not write MP3")
    result = cli(src, "-o", out, "--sample-rate", "96000")
    assert_clean_error(result, out, "96000 Hz", 1)
    assert ".part" not in result.output and tree(tmp_path) == ["in.wav"]


def test_bad_option_is_a_usage_error(cli, tmp_path):
    src = put(tmp_path / "in.wav")
    result = cli(src, "-o", tmp_path / "out.wav", "--channels", "left")
    assert result.exit_code == 2 and "Traceback" not in result.output
    result = cli(src, "-o", tmp_path / "out.wav", "--sample-rate", "1000")
    assert_clean_error(result, "--sample-rate", "8000-192000 Hz", 2)
    assert tree(tmp_path) == ["in.wav"]


# ---- folders ----

def make_folder(root):
    put(root / "a.wav", 1.0)
    put(root / "sub" / "b.flac", 0.8, sr=22050, channels=2)
    put(root / "sub" / "deeper" / "c.ogg", 0.6, sr=8000)
    (root / "sub" / "notes.txt").write_text("not audio, not a sidecar")
    put(root / ".hidden.wav", 1.0)
    return ["a.wav", "sub/b.flac", "sub/deeper/c.ogg"]


def report(out):
    return json.loads((out / "restore-report.json").read_text())


def test_folder_mirrors_tree(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    names = make_folder(src)
    result = cli(src, "-o", out)
    assert result.exit_code == 0, result.output
    assert tree(out) == sorted(names + ["restore-report.json"])
    assert sf.info(str(out / "sub" / "b.flac")).channels == 2
    assert sf.info(str(out / "sub" / "deeper" / "c.ogg")).samplerate == 8000
    rep = report(out)
    assert rep["summary"]["restored"] == 3 and rep["summary"]["skipped"] == 0 and rep["summary"]["failed"] == 0
    assert sorted(e["status"] for e in rep["files"]) == ["restored"] * 3
    assert "3 restored, 0 skipped, 0 failed" in result.output
    assert "\r" not in result.output


def test_folder_format_option(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    make_folder(src)
    assert cli(src, "-o", out, "--format", "flac").exit_code == 0
    assert tree(out) == ["a.flac", "restore-report.json", "sub/b.flac", "sub/deeper/c.flac"]
    assert_clean_error(cli(src, "-o", tmp_path / "o2", "--format", "xyz"), "--format xyz", "cannot write", 2)


def test_folder_skips_existing_and_overwrites(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    names = make_folder(src)
    assert cli(src, "-o", out).exit_code == 0
    before = mtimes(out)
    result = cli(src, "-o", out)
    assert result.exit_code == 0
    assert "3 of 3 files already restored" in result.output and "0 restored, 3 skipped, 0 failed" in result.output
    after = mtimes(out)
    assert {n: after[n] for n in names} == {n: before[n] for n in names}
    rep = report(out)
    assert rep["summary"] == {**rep["summary"], "restored": 0, "skipped": 3, "failed": 0}
    assert all(e["status"].startswith("skipped") for e in rep["files"])
    result = cli(src, "-o", out, "--overwrite")
    assert result.exit_code == 0 and "3 restored, 0 skipped" in result.output
    after = mtimes(out)
    assert all(after[n] != before[n] for n in names)


def test_folder_resumes_after_interruption(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    names = make_folder(src)
    assert cli(src, "-o", out).exit_code == 0
    (out / "sub" / "b.flac").unlink()  # as if the run had stopped before this file
    before = mtimes(out)
    result = cli(src, "-o", out)
    assert result.exit_code == 0
    assert "1 restored, 2 skipped, 0 failed" in result.output
    after = mtimes(out)
    assert after["a.wav"] == before["a.wav"] and after["sub/deeper/c.ogg"] == before["sub/deeper/c.ogg"]
    assert tree(out) == sorted(names + ["restore-report.json"])
    restored = [e for e in report(out)["files"] if e["status"] == "restored"]
    assert [e["input"] for e in restored] == [str(src / "sub" / "b.flac")]


def test_folder_interrupted_by_ctrl_c(cli, tmp_path, monkeypatch):
    """A real interruption mid-run, short files packed three to a window: the files of the finished
    window stay, those of the window being restored leave nothing, and the same command then restores
    only what is missing."""
    src, out = tmp_path / "in", tmp_path / "out"
    names = [f"f{i}.wav" for i in range(7)]
    for i, name in enumerate(names):  # 9 s each: three fit a 30 s window, 0.5 s apart
        put(src / name, data=speechlike(9.0, 16000, seed=i))
    original = Restorer._sample
    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the third window: the first window's files are written (decodes run one
            raise KeyboardInterrupt  # window behind sampling), the second's are not yet
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Restorer, "_sample", interrupted)
    result = cli(src, "-o", out)
    assert result.exit_code == 130 and "run the same command again to resume" in result.output
    assert "Traceback" not in result.output
    assert tree(out) == ["f0.wav", "f1.wav", "f2.wav", "restore-report.json"]  # no partial file, no temporary file
    before = mtimes(out)
    monkeypatch.setattr(Restorer, "_sample", original)
    result = cli(src, "-o", out)
    assert result.exit_code == 0 and "4 restored, 3 skipped, 0 failed" in result.output
    assert tree(out) == sorted(names + ["restore-report.json"])
    assert all(mtimes(out)[n] == before[n] for n in names[:3])  # the finished files were left alone
    for name in names:
        assert sf.info(str(out / name)).frames == 9 * 16000


@pytest.mark.slow
def test_a_killed_folder_run_with_shared_windows_resumes(tiny_model, tmp_path):
    """The command, killed (SIGKILL) once its first output is written, short files packed three to a
    window: what it wrote is complete and what an uninterrupted run writes, nothing else is there under
    an output's name, and the same command skips it and restores the rest."""
    from restore.options import RestoreOptions

    src, out, plain = tmp_path / "in", tmp_path / "out", tmp_path / "plain"
    names = [f"c{i:02d}.wav" for i in range(45)]
    for i, name in enumerate(names):
        put(src / name, data=speechlike(9.0, 16000, seed=i))
    options = RestoreOptions(sampler="flash", steps=1)
    assert api.run(src, plain, options, model=tiny_model, echo=lambda s: None) == 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "OMP_NUM_THREADS": "1"}
    run = subprocess.Popen([sys.executable, "-m", "restore", str(src), "-o", str(out), "--model", str(tiny_model),
                            "--sampler", "flash", "--steps", "1", "-q"], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not any((out / n).exists() for n in names):
            assert run.poll() is None, run.stderr.read().decode()
            assert time.monotonic() < deadline, "no output within 120 s"
            time.sleep(0.005)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    done = [n for n in names if (out / n).exists()]
    assert 0 < len(done) < len(names)
    for name in done:  # whatever is there under an output's name is complete
        assert np.array_equal(sf.read(out / name)[0], sf.read(plain / name)[0]), name
    said = []
    assert api.run(src, out, options, model=tiny_model, echo=said.append) == 0
    assert f"{len(done)} of {len(names)} files already restored; skipping them (use overwrite=True to redo)" in said
    assert tree(out) == sorted(names + ["restore-report.json"])  # the killed run's temporary files are gone
    for name in names:
        assert sf.info(str(out / name)).frames == 9 * 16000


def test_folder_with_bad_files(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    names = make_folder(src)
    (src / "sub" / "bad.wav").write_text("not audio\n" * 40)
    x = speechlike(1.0, 16000)
    x[10] = np.nan
    put(src / "nan.wav", data=x, subtype="FLOAT")
    result = cli(src, "-o", out)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert f"error: {src / 'sub' / 'bad.wav'}: not a readable audio file" in result.output
    assert f"error: {src / 'nan.wav'}: the audio contains NaN" in result.output
    assert "3 restored, 0 skipped, 2 failed" in result.output
    assert tree(out) == sorted(names + ["restore-report.json"])  # the good ones, and nothing else
    rep = report(out)
    assert rep["summary"]["restored"] == 3 and rep["summary"]["failed"] == 2
    failed = {e["input"]: e["error"] for e in rep["files"] if e["status"] == "failed"}
    assert set(failed) == {str(src / "sub" / "bad.wav"), str(src / "nan.wav")}
    assert all(path in error for path, error in failed.items())
    # the next run retries only the failures
    result = cli(src, "-o", out)
    assert result.exit_code == 1 and "0 restored, 3 skipped, 2 failed" in result.output


def test_folder_output_equal_to_input(cli, tmp_path):
    src = tmp_path / "in"
    make_folder(src)
    before = tree(src)
    assert_clean_error(cli(src, "-o", src), src, "is the input folder", 2)
    assert tree(src) == before


def test_folder_output_is_a_file(cli, tmp_path):
    src = tmp_path / "in"
    make_folder(src)
    (tmp_path / "out.wav").write_text("x")
    assert_clean_error(cli(src, "-o", tmp_path / "out.wav"), tmp_path / "out.wav", "is a file", 2)


def test_folder_output_inside_input(cli, tmp_path):
    """Resuming must not take the outputs for inputs."""
    src = tmp_path / "in"
    out = src / "restored"
    names = make_folder(src)
    assert cli(src, "-o", out).exit_code == 0
    result = cli(src, "-o", out)
    assert result.exit_code == 0 and "0 restored, 3 skipped, 0 failed" in result.output
    assert tree(out) == sorted(names + ["restore-report.json"])


def test_folder_outputs_that_would_collide(cli, tmp_path):
    """a.wav and a.flac both become a.flac with --format flac: the second is refused, never written
    over the first."""
    src, out = tmp_path / "in", tmp_path / "out"
    put(src / "a.wav", 1.0)
    put(src / "a.flac", 0.7)
    result = cli(src, "-o", out, "--format", "flac")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"error: {src / 'a.wav'}: its output {out / 'a.flac'} is already the output of {src / 'a.flac'}" \
        in result.output
    assert "1 restored, 0 skipped, 1 failed" in result.output
    assert sf.info(str(out / "a.flac")).frames == int(0.7 * 16000)  # restored from a.flac, not replaced
    assert tree(out) == ["a.flac", "restore-report.json"]


def test_folder_sidecar_transcripts(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    make_folder(src)
    (src / "a.txt").write_text("a transcript for a")
    assert cli(src, "-o", out).exit_code == 0
    sources = {e["input"]: e["transcript"] for e in report(out)["files"]}
    assert sources == {str(src / "a.wav"): "sidecar", str(src / "sub" / "b.flac"): "none",
                       str(src / "sub" / "deeper" / "c.ogg"): "none"}


# ---- plans and trace ----

@pytest.mark.slow
def test_split_plan_with_trace(cli, tmp_path):
    src = put(tmp_path / "in.wav", 2.0)
    trace = tmp_path / "trace.json"
    result = cli(src, "-o", tmp_path / "out.wav", "--plan", "split", "--mlp-share", "0.5", "--trace", trace,
                 "--steps", "2", fast=False)
    assert result.exit_code == 0, result.output
    assert sf.info(str(tmp_path / "out.wav")).frames == 2 * 16000
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"main", "worker", "second engine", "pipeline", "io", "phases"} <= tracks
    phases = {e["name"] for e in events if e["ph"] == "X" and e["tid"] == phase_track(events)}
    assert {"loading the model (split plan)", "starting the worker process"} <= phases
    assert f"trace: {trace}" in result.output


def phase_track(events):
    return next(e["tid"] for e in events if e["ph"] == "M" and e["args"]["name"] == "phases")


def test_unknown_plan_is_a_usage_error(cli, tmp_path):
    src = put(tmp_path / "in.wav", 1.0)
    result = cli(src, "-o", tmp_path / "out.wav", "--plan", "cuda", "--device", "cpu")
    assert result.exit_code == 2 and "cuda" in result.output and "Traceback" not in result.output


def test_cuda_graphs_without_the_cuda_plan_is_a_usage_error(cli, tmp_path):
    src = put(tmp_path / "in.wav", 1.0)
    result = cli(src, "-o", tmp_path / "out.wav", "--plan", "cpu", "--compile", "cuda-graphs")
    assert result.exit_code == 2 and "cuda" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out.wav").exists()


# ---- issue 48: refused before work, full disks, formats, reports, what a killed run left ----

@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if the model is loaded: what these refusals must come before."""
    def boom(*a, **k):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr("restore.weights.load", boom)


@pytest.mark.parametrize("args, problem", [
    (["--batch", "0"], "--batch must be at least 1, got 0"),
    (["--batch", "-5"], "--batch must be at least 1, got -5"),
    (["--plan", "split", "--mlp-share", "5"], "--mlp-share must be a share between 0 and 1, got 5.0"),
    (["--device", "tpu"], "--device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
])
def test_bad_run_options_are_refused_before_the_model_loads(cli, tmp_path, no_model_load, args, problem):
    src = put(tmp_path / "in.wav")
    assert_clean_error(cli(src, "-o", tmp_path / "out.wav", *args), problem.split()[0], problem, 2)
    assert tree(tmp_path) == ["in.wav"]


def test_the_apple_plan_is_refused_where_its_engines_are_missing(cli, tmp_path, monkeypatch, no_model_load):
    """A fake Linux machine (no MLX GPU, no Core ML): refused at once, not a 16-minute CPU share sweep."""
    from restore.engines import plan as plan_mod
    monkeypatch.setattr(plan_mod, "apple_engines", lambda: [])
    src = put(tmp_path / "in.wav")
    result = cli(src, "-o", tmp_path / "out.wav", "--plan", "apple")
    assert_clean_error(result, "--plan apple", "needs an Apple Silicon Mac", 2)
    assert "use --plan auto" in result.output and tree(tmp_path) == ["in.wav"]


@pytest.mark.parametrize("case", ["nan", "silent"])
def test_silent_and_nan_inputs_are_refused_before_the_model_loads(cli, tmp_path, no_model_load, case):
    src, problem = _bad_inputs(tmp_path)[case]
    assert_clean_error(cli(src, "-o", tmp_path / "out" / "restored.wav"), src, problem, 1)


def test_help_is_not_cut_at_80_columns():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and "…" not in result.output and "restore-report.json" in result.output


def test_the_first_seconds_say_what_is_loading(tiny_model, tmp_path, capsys):
    src = put(tmp_path / "in.wav")
    code = api.run(src, tmp_path / "out.wav", model=tiny_model, progress=True, echo=lambda s: None)
    assert code == 0 and "loading the model (cpu plan)" in capsys.readouterr().err


def test_a_file_cut_short_is_restored_with_a_warning(cli, tmp_path):
    src = put(tmp_path / "in.wav", 2.0)
    with open(src, "r+b") as f:
        f.truncate(src.stat().st_size // 2)
    result = cli(src, "-o", tmp_path / "out.wav")
    assert result.exit_code == 0, result.output
    assert "warning: the file is cut short: its header says 2.0 s, it holds 1.0 s" in result.output


def test_a_transcript_longer_than_the_model_reads_is_said(cli, tmp_path):
    src = put(tmp_path / "in.wav")
    long = " ".join(["word"] * 200)  # 999 characters: the tiny model reads 511 a window
    result = cli(src, "-o", tmp_path / "out.wav", "--transcript", long)
    assert result.exit_code == 0, result.output
    assert "warning: the transcript is longer than the model reads (511 characters" in result.output
    assert "window(s) 1" in result.output
    assert "warning" not in cli(src, "-o", tmp_path / "out2.wav", "--transcript", "a few words").output


def test_folder_lists_files_in_formats_it_does_not_read(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    put(src / "a.wav")
    (src / "sub").mkdir()
    (src / "sub" / "talk.m4a").write_bytes(b"\0\0\0 ftypM4A " + bytes(100))
    (src / "notes.pdf").write_bytes(b"%PDF")  # not audio: not listed
    result = cli(src, "-o", out)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "warning: 1 file(s) skipped, their format is not read (.m4a); convert them first, e.g. ffmpeg -i " \
           "talk.m4a talk.flac" in result.output
    assert "1 restored, 0 skipped, 0 failed, 1 not read" in result.output
    rep = report(out)
    (entry,) = [e for e in rep["files"] if e["input"] == str(src / "sub" / "talk.m4a")]
    assert entry["status"] == "skipped (format not read)" and "ffmpeg" in entry["error"]
    assert rep["summary"]["not_read"] == 1 and len(rep["files"]) == 2
    only = tmp_path / "only"
    (only / "x.m4a").parent.mkdir()
    (only / "x.m4a").write_bytes(b"\0\0\0 ftypM4A ")
    assert_clean_error(cli(only, "-o", tmp_path / "o2"), only, "1 file(s) in formats it does not read", 2)


def test_a_full_disk_fails_the_file_and_stops_the_folder_run(cli, tmp_path, monkeypatch):
    """A write into b's output fails as libsndfile fails on a full disk ("System error", no errno)."""
    src, out = tmp_path / "in", tmp_path / "out"
    for name in ("a", "b", "c"):
        put(src / f"{name}.wav")
    full = []
    write = sf.SoundFile.write

    def failing(self, data):
        if os.path.basename(self.name).startswith(".b.wav."):
            full.append(1)
            raise sf.LibsndfileError(2)
        return write(self, data)

    monkeypatch.setattr(sf.SoundFile, "write", failing)
    monkeypatch.setattr(api.audio, "free_bytes", lambda folder: 0 if full else 1 << 40)
    result = cli(src, "-o", out)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"error: {out / 'b.wav'}: no space left on device (" in result.output
    assert f"stopped: no space left on device for {out / 'b.wav'}; 1 file(s) not restored" in result.output
    assert tree(out) == ["a.wav", "restore-report.json"]  # no temporary file left
    status = {Path(e["input"]).name: e["status"] for e in report(out)["files"]}
    assert status == {"a.wav": "restored", "b.wav": "failed",
                      "c.wav": f"not restored (stopped: no space left on device for {out / 'b.wav'})"}
    assert "MB needed" in [e for e in report(out)["files"] if e["status"] == "failed"][0]["error"]


def test_free_space_is_checked_before_a_file_starts(cli, tmp_path, monkeypatch):
    src = put(tmp_path / "in.wav", 2.0)
    monkeypatch.setattr(api.audio, "free_bytes", lambda folder: 200_000)
    out = tmp_path / "out.wav"  # 64 kB of audio, its 128 kB float copy, and the margin
    assert_clean_error(cli(src, "-o", out), out, "no space left on device (1.2 MB needed, 0.2 MB free)", 1)
    assert tree(tmp_path) == ["in.wav"]


def test_stale_temporary_files_are_removed_and_counted(cli, tmp_path):
    from tests.test_audio import dead_pid
    src, out = tmp_path / "in", tmp_path / "out"
    names = make_folder(src)
    dead = dead_pid()
    left = [out / f".a.wav.{dead}.abcdefgh.part", out / "sub" / f".b.flac.{dead}.12345678.float.part",
            out / "sub" / ".gone.wav.qwertyui.part"]
    live = out / f".c.ogg.{os.getppid()}.abcdefgh.part"
    for p in left + [live]:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * 100)
    result = cli(src, "-o", out)
    assert result.exit_code == 0, result.output
    assert f"removed 3 temporary file(s) that an interrupted run left in {out}" in result.output
    assert tree(out) == sorted(names + ["restore-report.json", live.name])
    single = tmp_path / "single"
    (single / f".x.wav.{dead}.abcdefgh.part").parent.mkdir()
    (single / f".x.wav.{dead}.abcdefgh.part").write_bytes(b"x")
    (single / f".y.wav.{dead}.abcdefgh.part").write_bytes(b"x")  # another output's: not this run's to judge
    result = cli(src / "a.wav", "-o", single / "x.wav")
    assert "removed 1 temporary file(s)" in result.output
    assert tree(single) == [f".y.wav.{dead}.abcdefgh.part", "x.wav"]


def test_a_rerun_keeps_the_earlier_reports(cli, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    make_folder(src)
    assert cli(src, "-o", out).exit_code == 0
    result = cli(src, "-o", out)
    assert "0 restored, 3 skipped, 0 failed; report" in result.output  # no "0.00x realtime" for nothing
    assert cli(src, "-o", out).exit_code == 0
    rep = report(out)
    assert rep["summary"]["skipped"] == 3 and [h["summary"]["restored"] for h in rep["history"]] == [3, 0]
    assert all("history" not in h for h in rep["history"])
    other = tmp_path / "other.json"
    other.write_text('{"something": "else"}')
    assert_clean_error(cli(src / "a.wav", "-o", tmp_path / "x.wav", "--report", other), other,
                       "is not a restore report; choose another --report", 2)
    assert other.read_text() == '{"something": "else"}'


def _private_tmpfs_works():
    import subprocess
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                              capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _private_tmpfs_works(), reason="needs a private mount namespace (unshare -rm) for a tmpfs")
def test_a_real_full_disk(tiny_model, tmp_path):
    """A 2 MB tmpfs in a private mount namespace: the first FLAC output fits, the second runs out of space
    while it is written (no check can foresee a compressed size), the third is not started."""
    import subprocess
    import sys
    src, out = tmp_path / "in", tmp_path / "small"
    x = speechlike(30.0, 48000)
    for name in ("a", "b", "c"):
        put(src / f"{name}.wav", data=np.stack([x, 0.5 * x], axis=1), sr=48000)
    out.mkdir()
    command = (f"mount -t tmpfs -o size=2m tmpfs {out} && {sys.executable} -m restore {src} -o {out / 'f'} "
               f"--model {tiny_model} --sampler flash --steps 1 --level model --format flac; echo rc=$?; "
               f"ls -A {out / 'f'}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    output = done.stdout + done.stderr
    assert "rc=1" in output and "Traceback" not in output and "LibsndfileError" not in output
    assert f"error: {out / 'f' / 'b.flac'}: no space left on device (up to " in output
    assert "stopped: no space left on device" in output and "1 file(s) not restored" in output
    assert sorted(done.stdout.split()[1:]) == ["a.flac", "restore-report.json"]  # no temporary file
