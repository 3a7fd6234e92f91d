"""Folder runs on Ray (issue 49, restore/pipeline/cluster.py), with a local Ray runtime and the tiny model:
outputs bit-identical to a local folder run's, a worker that dies retried, a killed run resumed; and
without --cluster, Ray is never imported. A Ray runtime takes ~10 s to start on 2 cores: those tests are
slow, and they skip where the `cluster` extra is not installed."""

import json
import os
import signal
import socket
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
from restore.errors import UsageError
from restore.options import RestoreOptions
from restore.pipeline import cluster

ROOT = Path(__file__).resolve().parent.parent
OPTIONS = RestoreOptions(sampler="flash", steps=2, seed=3)
FLAGS = ["--sampler", "flash", "--steps", "2", "--seed", "3"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread here, and so in the local runtime's sampling actor (it takes this process's count):
    the tiny model's ops are too small for threads to pay."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def ray_runtime(tmp_path_factory):
    """One local runtime of 2 CPUs for the module (cluster runs use a runtime that is already up). The
    first sampling call its actors get exits the worker (cluster.CRASH_ONCE_ENV): Ray must retry it.
    Yields the marker that call leaves."""
    ray = pytest.importorskip("ray")
    marker = tmp_path_factory.mktemp("crash") / "crashed"
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           cluster.CRASH_ONCE_ENV: str(marker)}
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False,
             runtime_env={"env_vars": env})
    yield marker
    ray.shutdown()


def put(path: Path, seconds: float, sr: int = 16000, seed: int = 0, channels: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    x = speechlike(seconds, sr, seed=seed)
    if channels > 1:
        x = np.stack([x] + [0.5 * speechlike(seconds, sr, seed=seed + c) for c in range(1, channels)], axis=1)
    sf.write(path, x, sr)
    return path


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def assert_same_audio(a: Path, b: Path, names: list[str]) -> None:
    for name in names:
        x, rx = sf.read(a / name, dtype="float32")
        y, ry = sf.read(b / name, dtype="float32")
        assert rx == ry and x.shape == y.shape and np.array_equal(x, y), name


def entries(out: Path) -> dict[str, dict]:
    return {e["input"]: e for e in json.loads((out / api.REPORT_NAME).read_text())["files"]}


# ---------------------------------------------------------------- without Ray
@pytest.mark.slow
def test_without_cluster_ray_is_never_imported(tiny_model, tmp_path):
    put(tmp_path / "in" / "a.wav", 1.0)
    code = (f"import sys\nfrom restore import api\nfrom restore.options import RestoreOptions\n"
            f"code = api.run({str(tmp_path / 'in')!r}, {str(tmp_path / 'out')!r}, RestoreOptions(sampler='flash', "
            f"steps=1), model={str(tiny_model)!r}, echo=lambda s: None)\n"
            f"print(code, sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "[]"]
    assert (tmp_path / "out" / "a.wav").is_file()


@pytest.mark.parametrize("address", ["local", "auto", "ray://head:10001"])
def test_the_three_forms_are_accepted(address):
    assert cluster.check_address(address) == address


@pytest.mark.parametrize("address", ["", "ray://", "head:6379", "LOCAL", "http://head:8265"])
def test_other_forms_are_usage_errors(address):
    with pytest.raises(UsageError, match="cluster must be local, auto or ray://HOST:PORT"):
        cluster.check_address(address)


def test_cluster_is_refused_where_it_cannot_act(tiny_model, tmp_path):
    """Before any work: a file input, a bad form, --trace (one process's timeline)."""
    src = put(tmp_path / "in" / "a.wav", 1.0)
    with pytest.raises(UsageError, match="applies to folder runs"):
        api.run(src, tmp_path / "a.out.wav", OPTIONS, model=tiny_model, cluster="local")
    with pytest.raises(UsageError, match="cluster must be"):
        api.run(src.parent, tmp_path / "out", OPTIONS, model=tiny_model, cluster="yes")
    with pytest.raises(UsageError, match="trace records one process"):
        api.run(src.parent, tmp_path / "out", OPTIONS, model=tiny_model, cluster="local", trace=tmp_path / "t.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_without_ray_installed_the_error_says_how_to_install_it(tiny_model, tmp_path, monkeypatch):
    put(tmp_path / "in" / "a.wav", 1.0)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = CliRunner().invoke(app, [str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--model", str(tiny_model),
                                      "--cluster", "local", *FLAGS])
    assert result.exit_code == 2, result.output
    assert "error: --cluster needs Ray, which is not installed: pip install 'restore[cluster]'" in result.output
    assert not (tmp_path / "out" / "a.wav").exists()


def test_the_progress_line_shows_files_hours_and_the_realtime_factor(capsys):
    clock = iter([100.0, 160.0])
    meter = cluster._Meter(True, files=4, seconds=7200.0, clock=lambda: next(clock))
    meter.done(1800.0)
    line = capsys.readouterr().err
    assert line == "\r[1/4 files] 0.50/2.00 h of audio, 30.0x realtime  "
    meter.end()
    quiet = cluster._Meter(False, files=4, seconds=7200.0)
    quiet.done(1800.0)
    quiet.end()
    assert "files" not in capsys.readouterr().err


# ---------------------------------------------------------------- on a local Ray runtime
@pytest.mark.slow
def test_cluster_run_is_bit_identical_to_a_local_folder_run(ray_runtime, live_model, tmp_path):
    """Windows of several lengths, rates and channel counts (the full-band join included), short files
    packed into shared windows (mono, stereo, with and without sidecar transcripts), and a bad file; the
    sampling worker dies on its first call and Ray retries it."""
    src = tmp_path / "in"
    put(src / "a.wav", 2.0, seed=1)
    put(src / "long.flac", 35.0, seed=2)                       # two windows
    for i in range(8):                                         # 2-9 s: packed with a.wav, into two windows
        put(src / "clips" / f"c{i}.wav", 2.0 + i, seed=20 + i)
    (src / "clips" / "c6.txt").write_text("another sidecar transcript")
    put(src / "sub" / "stereo.wav", 3.0, 44100, seed=3, channels=2)
    put(src / "sub" / "stereo2.wav", 2.5, 48000, seed=6, channels=2)  # packed with stereo.wav
    put(src / "sub" / "narrow.wav", 1.5, 8000, seed=5)
    (src / "sub" / "narrow.txt").write_text("a sidecar transcript")  # packed with c6
    (src / "bad.wav").write_text("not audio\n" * 40)
    names = ["a.wav", "long.flac", *(f"clips/c{i}.wav" for i in range(8)), "sub/narrow.wav", "sub/stereo.wav",
             "sub/stereo2.wav"]
    assert not ray_runtime.exists()

    assert api.run(src, tmp_path / "plain", OPTIONS, model=live_model, echo=lambda s: None) == 1
    said = []
    assert api.run(src, tmp_path / "ray", OPTIONS, model=live_model, cluster="local", echo=said.append) == 1

    assert ray_runtime.exists()  # a worker did die, and its unit was sampled again
    assert tree(tmp_path / "ray") == sorted(names + [api.REPORT_NAME])  # nothing half-written, no temporary file
    assert_same_audio(tmp_path / "plain", tmp_path / "ray", names)
    plain, ray_ = entries(tmp_path / "plain"), entries(tmp_path / "ray")
    assert plain.keys() == ray_.keys()
    bad = str(src / "bad.wav")
    assert ray_[bad]["status"] == "failed" and ray_[bad]["error"] == plain[bad]["error"]
    assert any(s.startswith("error: ") and bad in s for s in said)
    timing = {"output", "seconds_wall", "realtime_factor", "node"}
    for name, e in ray_.items():
        if name != bad:
            assert e["node"] == socket.gethostname()
            assert {k: v for k, v in e.items() if k not in timing} == \
                   {k: v for k, v in plain[name].items() if k not in timing}, name
    summary = json.loads((tmp_path / "ray" / api.REPORT_NAME).read_text())["summary"]
    assert (summary["restored"], summary["failed"], summary["skipped"]) == (len(names), 1, 0)


@pytest.mark.slow
def test_a_killed_cluster_run_resumes_where_it_stopped(ray_runtime, live_model, tmp_path):
    """The command, killed (SIGKILL, Ray's processes with it) once its first output is written: what it
    wrote is complete, nothing else is there under an output's name, and the same command restores the
    rest, bit-identical to a local folder run."""
    src = tmp_path / "in"
    names = [f"f{i}.wav" for i in range(6)]
    for i, name in enumerate(names):
        put(src / name, 35.0, seed=10 + i)
    assert api.run(src, tmp_path / "plain", OPTIONS, model=live_model, echo=lambda s: None) == 0
    out = tmp_path / "ray"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}  # one torch thread, as here
    env.pop(cluster.CRASH_ONCE_ENV, None)
    run = subprocess.Popen([sys.executable, "-m", "restore", str(src), "-o", str(out), "--model", str(live_model),
                            "--cluster", "local", *FLAGS], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not any((out / n).exists() for n in names):
            assert run.poll() is None, run.stderr.read().decode()
            assert time.monotonic() < deadline, "no output within 240 s"
            time.sleep(0.05)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    done = [n for n in names if (out / n).exists()]
    assert 0 < len(done) < len(names)
    assert_same_audio(tmp_path / "plain", out, done)  # whatever is there under an output's name is complete

    said = []
    assert api.run(src, out, OPTIONS, model=live_model, cluster="local", echo=said.append) == 0
    assert f"{len(done)} of {len(names)} files already restored; skipping them (use overwrite=True to redo)" in said
    assert tree(out) == sorted(names + [api.REPORT_NAME])  # the killed run's temporary files are gone
    assert_same_audio(tmp_path / "plain", out, names)
    report = entries(out)
    assert sorted(Path(k).name for k, e in report.items() if e["status"] == "restored") == \
           sorted(set(names) - set(done))


@pytest.mark.slow
def test_reading_and_writing_run_on_tasks_of_their_own(ray_runtime, capsys):
    """Ray Data fuses a task stage into the actor stage after it when their remote arguments agree: the
    reads would then run in the sampling actors. They must not."""
    import ray

    stage = dict(options=OPTIONS, model_rate=16000, geometry=None, settings={})
    ds = cluster._dataset(ray, units=[cluster._Unit([])], stage=stage, sampler={}, actors=1, held={"num_cpus": 1})
    ds.explain()
    physical = capsys.readouterr().out.split("Physical Plan (Optimized)")[1]
    assert "TaskPoolMapOperator[Map(_read)]" in physical
    assert "ActorPoolMapOperator[MapBatches(_Sampler)]" in physical
    assert "TaskPoolMapOperator[FlatMap(_write)]" in physical


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_auto_and_ray_client_join_a_running_cluster(live_model, tmp_path):
    """A cluster begun apart (`ray start --head`, 2 CPUs): `--cluster auto` joins the one RAY_ADDRESS names,
    `--cluster ray://HOST:PORT` the one given, through Ray Client. Either restores as a local folder run
    does (one CPU slot: one torch thread, as here). Token authentication is off on both sides: joining is
    what is tested, not Ray's security."""
    pytest.importorskip("ray")
    src = tmp_path / "in"
    names = ["a.wav", "b.wav"]
    put(src / "a.wav", 2.0, seed=1)
    put(src / "b.wav", 3.0, 22050, seed=2)
    assert api.run(src, tmp_path / "plain", OPTIONS, model=live_model, echo=lambda s: None) == 0
    port, client = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    env.pop(cluster.CRASH_ONCE_ENV, None)
    head = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
                             f"--ray-client-server-port={client}", "--num-cpus=2", "--num-gpus=0",
                             "--include-dashboard=false", "--disable-usage-stats", "--block"],
                            env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        for line in head.stdout:  # until it is up
            if "Ray runtime started" in line:
                break
        else:
            pytest.fail("the head node did not start")
        for form, extra in (("auto", {"RAY_ADDRESS": f"127.0.0.1:{port}"}), (f"ray://127.0.0.1:{client}", {})):
            out = tmp_path / form.replace(":", "_").replace("/", "_")
            done = subprocess.run([sys.executable, "-m", "restore", str(src), "-o", str(out), "--model",
                                   str(live_model), "--cluster", form, *FLAGS], env={**env, **extra},
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            assert "2 restored, 0 skipped, 0 failed" in done.stderr
            assert_same_audio(tmp_path / "plain", out, names)
            assert {e["node"] for e in entries(out).values()} == {socket.gethostname()}
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops what it started
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()


class _FlakyRay:
    """ray.init that fails with the given messages, in order, then joins."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def init(self, address, **kwargs):
        self.calls += 1
        if self.errors:
            raise ConnectionError(self.errors.pop(0))


def test_joining_asks_again_when_the_client_server_failed_to_start(monkeypatch):
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    fail = "ray client server failed to start: Starting Ray client server failed. See ray_client_server_23000.err"
    ray = _FlakyRay(fail, fail)
    cluster._join(ray, "ray://127.0.0.1:10001", {})
    assert ray.calls == 3
    ray = _FlakyRay(*[fail] * cluster.CLIENT_START_TRIES)
    with pytest.raises(ConnectionError):
        cluster._join(ray, "ray://127.0.0.1:10001", {})
    assert ray.calls == cluster.CLIENT_START_TRIES
    ray = _FlakyRay("Could not find any running Ray instance")  # no cluster there: final at once
    with pytest.raises(ConnectionError):
        cluster._join(ray, "auto", {})
    assert ray.calls == 1
