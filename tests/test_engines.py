"""Plans and engines: equivalence of every plan, the split MLP and its sweep, the chunk worker's
protocol (shared memory, declared idle time), faults, and the trace."""

import json
import os
import signal
import time

import numpy as np
import pytest
import torch

from restore import weights
from restore.codec import build_codec
from restore.engines.engine import Engine
from restore.engines.factory import build_engine
from restore.engines.plan import resolve_plan
from restore.engines.split import SecondEngine, SplitSwiGLU, split_model, sweep
from restore.engines.trace import Tracer
from restore.model.layers import SwiGLU
from restore.pipeline.loop import generate_latents
from restore.config import SamplerConfig

T = 40
N = T * 256


def load(model_dir):
    files = weights.load(model_dir)
    model = weights.build_model(files)
    for p in model.parameters():  # away from the zero init, so every branch differs
        torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(p.numel()))
    return model, build_codec(files.codec)


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory):
    model, codec = load(tiny_model)
    folder = tmp_path_factory.mktemp("engine_model")
    files = weights.load(tiny_model)
    weights.save(folder, files.model, files.codec, model.state_dict(), dtype=torch.float32)
    return folder


def window(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, N, generator=g) * 0.05


def engine(plan_name, model_dir, tracer=None, share=0.5):
    files = weights.load(model_dir)
    model, codec = weights.build_model(files), build_codec(files.codec)
    plan = resolve_plan(plan_name, "cpu", mlp_share=share)
    return build_engine(plan, model, codec, model_dir=model_dir, frames=T, samples=N, tracer=tracer)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_split_mlp_is_exact(share):
    torch.manual_seed(0)
    mlp = SwiGLU(32, 90)
    second = SecondEngine("cpu")
    split = SplitSwiGLU(mlp, share, "cpu", torch.float32, second)
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        assert rel(split(x), mlp(x)) < 1e-6
    assert split.gate_s.shape[0] == round(share * 90)
    second.close()


def test_sweep_picks_a_share_and_drops_unsplit_weights(model_dir):
    from restore import text as text_mod
    files = weights.load(model_dir)
    model = weights.build_model(files)
    second = SecondEngine("cpu")
    x = torch.randn(1, T, 514)
    ctx = model.branch_context(window(), build_codec(files.codec).encode(window()), *text_mod.batch([None], 16))
    sot = ctx.rows(slice(2, 3))
    with torch.no_grad():
        ref = model.velocity(x, torch.tensor([0.5]), sot)
        originals = [b.mlp for b in model.blocks]
        share, times = sweep(lambda s: split_model(model, s, "cpu", torch.float32, second, originals),
                             lambda: model.velocity(x, torch.tensor([0.5]), sot), (0.0, 0.5))
        del originals
        assert rel(model.velocity(x, torch.tensor([0.5]), sot), ref) < 1e-5
    assert share in times and set(times) == {0.0, 0.5}
    assert all(isinstance(b.mlp, SplitSwiGLU) for b in model.blocks)
    assert not any(isinstance(m, SwiGLU) for m in model.blocks.modules())  # unsplit weights dropped
    second.close()


def test_long_phases_are_shown_and_stop_on_ctrl_c(model_dir):
    """The share sweep names each share it measures, and a Ctrl-C in the middle of it is not swallowed."""
    from restore.engines.plan import Plan
    from restore.engines.torch_branches import TorchBranches
    files = weights.load(model_dir)
    model, codec = weights.build_model(files), build_codec(files.codec)
    said = []
    tracer = Tracer(enabled=True, status=said.append)
    branches = TorchBranches(model, Plan("split", "cpu", torch.float32, split=True), tracer)
    wave = window()
    try:
        branches.begin_window(wave, codec.encode(wave), ["hello"])
        assert said == [f"measuring how to split each MLP between two engines: share {s:g} ({i} of 3)"
                        for i, s in enumerate((0.0, 0.25, 0.5), 1)]
        assert {e["name"] for e in tracer.events if e["track"] == "phases"} == set(said)
    finally:
        branches.close()
    calls = []
    model = weights.build_model(files)
    velocity = model.velocity

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 4:  # the second share's warm-up
            raise KeyboardInterrupt
        return velocity(*args)

    model.velocity = interrupted
    branches = TorchBranches(model, Plan("split", "cpu", torch.float32, split=True), Tracer(False, said.append))
    try:
        with pytest.raises(KeyboardInterrupt):
            branches.begin_window(wave, codec.encode(wave), ["hello"])
        assert len(calls) == 4 and said[-1].endswith("(2 of 3)")
    finally:
        branches.close()


def test_compiling_is_shown_once_per_batch_shape(model_dir, monkeypatch):
    from restore.engines import torch_branches
    monkeypatch.setattr(torch_branches.torch, "compile", lambda fn, **kw: fn)  # the phase, not the compiler
    files = weights.load(model_dir)
    model, codec = weights.build_model(files), build_codec(files.codec)
    said = []
    branches = torch_branches.TorchBranches(model, resolve_plan("cpu", "cpu", compile="default"),
                                            Tracer(False, said.append))
    wave = window()
    branches.begin_window(wave, codec.encode(wave), ["hello"])
    x = torch.randn(1, T, 514)
    for _ in range(2):
        branches.velocities(x, 0.7, True)  # the cpu plan runs the branches one by one: one shape
        branches.velocities(x, 0.3, False)
    assert said == ["compiling the model for batches of 1 (once per batch shape)"]


def run_window(eng, codec, seed=0, steps=4, guided_until=0.5):
    """One window through `eng` as the Restorer drives it: -> (latents of the input, sampled latents, audio)."""
    wave = window(seed)
    cfg = SamplerConfig(steps=steps, guided_until=guided_until, churn=0.3)
    obs = eng.result(eng.encode_async(wave, urgent=True))
    eng.begin_window(wave, obs, ["a few words"], guided=any(cfg.schedule().guided))
    g = torch.Generator().manual_seed(seed)
    x = None
    for _, x in generate_latents(eng, torch.randn(obs.shape, generator=g), cfg, g):
        pass
    eng.idle()
    return obs, x, eng.result(eng.decode_async(x))


def test_an_unguided_window_builds_only_the_sot_rows(model_dir):
    """No guided step: the sot rows' conditions alone, which give exactly the velocities the sot rows of
    a window begun for guidance give (with and without recordings sharing the window); a guided step on
    such a window is refused rather than run on missing rows."""
    ref, eng = engine("cpu", model_dir), engine("cpu", model_dir)
    try:
        wave = window(3)
        obs = ref.result(ref.encode_async(wave))
        x = torch.randn(1, T, 514)
        for groups in (None, torch.tensor([[1] * 12 + [0] * 6 + [2] * 15 + [0] * 7])):
            ref.begin_window(wave, obs, ["hello"], groups)
            eng.begin_window(wave, obs, ["hello"], groups, guided=False)
            assert eng.branches.ctx is None and eng.branches.ctx_sot.cond_h.shape[0] == 1
            (a,) = ref.velocities(x, 0.6, False)
            (b,) = eng.velocities(x, 0.6, False)
            assert torch.equal(a, b)
        with pytest.raises(RuntimeError, match="guided step in a window begun unguided"):
            eng.velocities(x, 0.6, True)
    finally:
        ref.close()
        eng.close()


@pytest.mark.slow
def test_an_unguided_sampler_starts_no_worker_and_sweeps_nothing(model_dir, tmp_path):
    """The split plan on a sampler without guided steps (the shipped model's one step): everything runs in
    this process, no worker starts and the MLP share is not measured, and the audio is the cpu plan's.
    The first guided window then starts the worker and sweeps the share."""
    from restore.pipeline.restorer import Restorer
    ref = engine("cpu", model_dir)
    eng = engine("split", model_dir, share=None)
    try:
        *_, audio_ref = run_window(ref, None, seed=4, steps=2, guided_until=0.0)
        *_, audio = run_window(eng, None, seed=4, steps=2, guided_until=0.0)
        assert eng.worker is None and eng.local.branches.share is None and eng.local.branches.swept == {}
        assert torch.equal(audio, audio_ref)
        run_window(eng, None, seed=4, steps=2, guided_until=0.5)
        assert eng.worker is not None and eng.worker.alive and eng.local.branches.share is not None
    finally:
        ref.close()
        eng.close()
    import soundfile as sf
    sf.write(tmp_path / "in.wav", window(5)[0].numpy() * 4, 16000)
    outs = {}
    for plan in ("cpu", "split"):
        with Restorer(model_dir, plan=plan, device="cpu") as r:
            r.restore_file(tmp_path / "in.wav", tmp_path / f"{plan}.wav", steps=1)
            if plan == "split":
                assert r.engine.worker is None and r.engine.local.branches.swept == {}
        outs[plan] = sf.read(tmp_path / f"{plan}.wav")[0]
    np.testing.assert_array_equal(outs["split"], outs["cpu"])


@pytest.mark.parametrize("plan_name", ["cpu", "split"])
def test_every_plan_builds_an_engine(model_dir, plan_name):
    eng = engine(plan_name, model_dir)
    try:
        assert isinstance(eng, Engine)
    finally:
        eng.close()


def test_split_plan_matches_cpu_plan(model_dir):
    ref_eng = engine("cpu", model_dir)
    split_eng = engine("split", model_dir)
    try:
        wave = window(1)
        obs_ref = ref_eng.result(ref_eng.encode_async(wave))
        for eng in (ref_eng, split_eng):
            eng.begin_window(wave, obs_ref, ["hello"])
        obs = split_eng.result(split_eng.encode_async(wave, urgent=True))
        assert split_eng.worker is not None and rel(obs, obs_ref) < 1e-6  # the worker's codec
        x = torch.randn(1, T, 514)
        for a, b in zip(ref_eng.velocities(x, 0.7, True), split_eng.velocities(x, 0.7, True)):
            assert rel(b, a) < 1e-5  # u, so (worker chunks, guards, partitions), sot (split MLP)
        (a,) = ref_eng.velocities(x, 0.3, False)
        (b,) = split_eng.velocities(x, 0.3, False)
        assert rel(b, a) < 1e-5
        _, _, audio_ref = run_window(ref_eng, None, seed=2)
        _, _, audio = run_window(split_eng, None, seed=2)
        assert rel(audio, audio_ref) < 1e-4
        # recordings sharing the window: the worker's chunks take the same attention mask
        groups = torch.tensor([[1] * 12 + [0] * 6 + [2] * 15 + [0] * 7])
        for eng in (ref_eng, split_eng):
            assert eng.masks
            eng.begin_window(wave, obs_ref, [None], groups)
        grouped = [ref_eng.velocities(x, 0.7, True), split_eng.velocities(x, 0.7, True)]
        for a, b in zip(*grouped):
            assert rel(b, a) < 1e-5
        ref_eng.begin_window(wave, obs_ref, [None])
        assert rel(ref_eng.velocities(x, 0.7, True)[1], grouped[0][1]) > 1e-3  # the mask does act
        assert split_eng.warnings == []
    finally:
        split_eng.close()


@pytest.mark.slow
def test_compiled_cpu_plan_matches_eager(model_dir):
    files = weights.load(model_dir)
    model, codec = weights.build_model(files), build_codec(files.codec)
    eager = engine("cpu", model_dir)
    plan = resolve_plan("cpu", "cpu", compile="default")
    assert plan.compile == "default"
    compiled = build_engine(plan, model, codec, model_dir=model_dir, frames=T, samples=N)
    wave = window(3)
    obs = eager.result(eager.encode_async(wave))
    for eng in (eager, compiled):
        eng.begin_window(wave, obs, ["hello"])
    x = torch.randn(1, T, 514)
    for a, b in zip(eager.velocities(x, 0.7, True), compiled.velocities(x, 0.7, True)):
        assert rel(b, a) < 1e-4  # inductor reorders fp32 reductions


@pytest.mark.parametrize("name, mode", [("split", "default"), ("cpu", "cuda-graphs"), ("cpu", "fast")])
def test_compile_is_refused_where_it_does_not_apply(name, mode):
    with pytest.raises(ValueError):
        resolve_plan(name, "cpu", compile=mode)


@pytest.mark.slow
def test_codec_runs_only_in_declared_idle_time(model_dir):
    eng = engine("split", model_dir)
    try:
        wave = window(3)
        obs = eng.result(eng.encode_async(wave, urgent=True))  # before any guided window: in this process
        assert eng.worker is None
        eng.begin_window(wave, obs, [None])  # a guided window starts the worker
        handle = eng.encode_async(wave)
        time.sleep(1.0)
        eng.worker.poll()
        assert handle.job not in eng.worker.done  # queued, not run: nobody declared idle time
        eng.idle()
        deadline = time.time() + 30
        while handle.job not in eng.worker.done and time.time() < deadline:
            time.sleep(0.05)
            eng.worker.poll()
        assert handle.job in eng.worker.done
        assert rel(eng.result(handle), build_codec(weights.load(model_dir).codec).encode(wave)) < 1e-6
    finally:
        eng.close()


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_worker_fault_falls_back_to_the_main_process(model_dir, fault):
    ref_eng = engine("cpu", model_dir)
    eng = engine("split", model_dir)
    try:
        wave = window(4)
        obs = eng.result(eng.encode_async(wave, urgent=True))
        eng.begin_window(wave, obs, [None])
        ref_eng.begin_window(wave, obs, [None])
        x = torch.randn(1, T, 514)
        eng.velocities(x, 0.9, True)  # one good step through the worker
        pid = eng.worker.process.pid
        if fault == "kill":
            os.kill(pid, signal.SIGKILL)
        else:
            eng.worker.step_timeout = 2.0
            os.kill(pid, signal.SIGSTOP)
        got = eng.velocities(x, 0.8, True)
        want = ref_eng.velocities(x, 0.8, True)
        for a, b in zip(got, want):
            assert rel(a, b) < 1e-5
        assert eng.warnings and "worker" in eng.warnings[0]
        handle = eng.decode_async(obs)  # codec work continues locally
        assert rel(eng.result(handle), ref_eng.result(ref_eng.decode_async(obs))) < 1e-6
        assert len(eng.warnings) == 1
    finally:
        eng.close()


def test_trace_shows_branches_overlapping(model_dir, tmp_path):
    tracer = Tracer()
    eng = engine("split", model_dir, tracer=tracer)
    try:
        run_window(eng, None, seed=5, steps=4, guided_until=0.5)
    finally:
        eng.close()
    path = tmp_path / "trace.json"
    tracer.write(path)
    data = json.loads(path.read_text())
    names = {e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M"}
    assert {"main", "worker", "second engine"} <= names
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    sot = [e for e in spans if e["name"] == "sot"]
    worker = [e for e in spans if e["name"] in ("so", "u")]
    assert worker and sot
    overlaps = any(w["ts"] < s["ts"] + s["dur"] and s["ts"] < w["ts"] + w["dur"] for w in worker for s in sot)
    assert overlaps  # so/u ran in the worker while sot ran in the main process
    assert {"encode", "decode"} <= {e["name"] for e in spans}
