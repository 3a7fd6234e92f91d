"""The MLX engine and the apple plan on Linux (mlx[cpu]: no GPU, so both MLP shares run on CPU streams,
the same graph as a Mac's GPU + CPU split). Tolerances: relative L2 of the velocity against the fp32
torch reference, 1e-5 in fp32 (measured ~5e-7) and 2e-2 with bf16 GEMMs (measured 3e-5-7e-5 on this tiny
model; on real weights, docs/apple.md); audio from the apple plan against the cpu plan, 1e-4."""

import numpy as np
import pytest
import soundfile as sf
import torch

mx = pytest.importorskip("mlx.core")

from restore import weights  # noqa: E402
from restore.codec import build_codec  # noqa: E402
from restore.config import WindowConfig  # noqa: E402
from restore.engines import plan as plan_mod  # noqa: E402
from restore.engines.factory import build_engine  # noqa: E402
from restore.engines.mlx_branches import MLXBranches, SplitSwiGLU  # noqa: E402
from restore.engines.plan import Plan, resolve_plan  # noqa: E402
from restore.engines.mlx_model import SwiGLU, conv_weight_names, load  # noqa: E402
from restore.pipeline.restorer import Restorer  # noqa: E402

T = 40
N = T * 256


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory):
    """The tiny model with every weight away from its zero init, so that all branches differ."""
    files = weights.load(tiny_model)
    model = weights.build_model(files)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(p.numel()))
    folder = tmp_path_factory.mktemp("mlx_model")
    weights.save(folder, files.model, files.codec, model.state_dict(), dtype=torch.float32)
    return folder


@pytest.fixture(scope="module")
def window(model_dir):
    files = weights.load(model_dir)
    model, codec = weights.build_model(files), build_codec(files.codec)
    wave = torch.randn(1, N, generator=torch.Generator().manual_seed(1)) * 0.05
    obs = codec.encode(wave)
    ref = build_engine(Plan("cpu", "cpu", torch.float32), model, codec)
    ref.begin_window(wave, obs, ["a few words"])
    x = torch.randn(1, T, codec.latent_dim, generator=torch.Generator().manual_seed(2))
    return model, codec, wave, obs, x, ref.velocities(x, 0.7, True), ref.velocities(x, 0.3, False)


def mlx_branches(model_dir, model, codec, dtype=torch.float32, share=0.3, compile=False):
    return MLXBranches(Plan("apple", "cpu", dtype, mlp_share=share, engine="mlx"), model_dir, compile=compile)


def test_weights_load_under_the_reference_names(model_dir):
    from mlx.utils import tree_flatten
    state = weights.load(model_dir).state
    assert any(k.startswith("skip.") for k in state)  # the observation skip stays in torch (sampler loop)
    state = {k: v for k, v in state.items() if not k.startswith("skip.")}
    m = load(model_dir)
    params = dict(tree_flatten(m.parameters()))
    assert set(params) == set(state)  # nothing renamed, nothing missing
    convs = conv_weight_names(m)
    assert convs and all(k.startswith("encoder.") for k in convs)
    for name, value in state.items():  # the conv weights are the one documented layout change
        want = value.permute(0, 2, 1) if name in convs else value
        assert np.array_equal(np.array(params[name]), want.numpy()), name


@pytest.mark.parametrize("share,compile", [(0.0, False), pytest.param(0.3, True, marks=pytest.mark.slow)])
def test_velocity_matches_torch_fp32(model_dir, window, share, compile):
    model, codec, wave, obs, x, guided, unguided = window
    eng = mlx_branches(model_dir, model, codec, share=share, compile=compile)
    eng.begin_window(wave, obs, ["a few words"])
    for got, want in zip(eng.velocities(x, 0.7, True), guided):  # rows u, so, sot
        assert rel(got, want) < 1e-5
    assert rel(eng.velocities(x, 0.3, False)[0], unguided[0]) < 1e-5


def test_velocity_bf16_within_tolerance(model_dir, window):
    model, codec, wave, obs, x, guided, _ = window
    eng = mlx_branches(model_dir, model, codec, dtype=torch.bfloat16, share=0.3)
    eng.begin_window(wave, obs, ["a few words"])
    mlp = eng.mlx.blocks[0].mlp
    assert mlp.gate_m.dtype == mx.bfloat16 and mlp.gate_s.dtype == mx.float32  # GPU share bf16, CPU share fp32
    for got, want in zip(eng.velocities(x, 0.7, True), guided):
        assert rel(got, want) < 2e-2


def test_sweep_picks_a_share_and_drops_unsplit_weights(model_dir, window):
    model, codec, wave, obs, x, guided, _ = window
    eng = mlx_branches(model_dir, model, codec, share=None)
    assert all(isinstance(b.mlp, SwiGLU) for b in eng.mlx.blocks)
    eng.begin_window(wave, obs, ["a few words"])  # the first window sweeps
    assert eng.share in eng.swept and set(eng.swept) == {0.0, 0.25, 0.5}
    assert not any(isinstance(m, SwiGLU) for b in eng.mlx.blocks for _, m in b.named_modules())
    assert rel(eng.velocities(x, 0.7, True)[2], guided[2]) < 1e-5


def test_an_unguided_window_builds_only_the_sot_rows_and_sweeps_nothing(model_dir, window):
    model, codec, wave, obs, x, _, unguided = window
    eng = mlx_branches(model_dir, model, codec, share=None)
    eng.begin_window(wave, obs, ["a few words"], guided=False)
    assert eng.share is None and eng.swept == {} and eng.state.cond_h.shape[0] == 1  # the sot row alone
    assert all(isinstance(b.mlp, SwiGLU) for b in eng.mlx.blocks)
    assert rel(eng.velocities(x, 0.3, False)[0], unguided[0]) < 1e-5
    with pytest.raises(RuntimeError, match="guided step in a window begun unguided"):
        eng.velocities(x, 0.7, True)


def test_split_copies_own_their_memory(model_dir, window):
    """Dropping the unsplit MLPs frees their bytes: the split copies are not views that keep them alive."""
    from mlx.utils import tree_flatten
    model, codec = window[:2]
    eng = mlx_branches(model_dir, model, codec, share=None)
    unsplit = sum(v.nbytes for b in eng.mlx.blocks for _, v in tree_flatten(b.mlp.parameters()))
    originals = eng.split(0.3)
    assert all(isinstance(b.mlp, SplitSwiGLU) for b in eng.mlx.blocks)
    held = mx.get_active_memory()
    del originals
    assert held - mx.get_active_memory() == unsplit


def test_auto_plan_is_apple_on_apple_silicon(monkeypatch):
    monkeypatch.setattr(plan_mod.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(plan_mod.platform, "machine", lambda: "arm64")
    plan = resolve_plan("auto", worker_backend="torch")
    assert plan.name == "apple" and plan.engine == "mlx" and plan.worker and plan.split
    assert resolve_plan("auto", "cpu").name == "cpu"  # a named device keeps its plan
    monkeypatch.setattr(plan_mod.platform, "machine", lambda: "x86_64")
    assert resolve_plan("auto").name == "cpu"


def test_apple_plan_without_its_engines_runs_only_when_a_worker_backend_is_named(monkeypatch):
    """Where neither MLX's GPU nor Core ML exists, a user asking for the plan is refused (its CPU stand-ins
    sat many minutes in the share sweep); the tests name the torch worker to run its CPU emulation."""
    monkeypatch.setattr(plan_mod, "apple_engines", lambda: [])
    with pytest.raises(ValueError, match="needs an Apple Silicon Mac"):
        resolve_plan("apple", mlp_share=0.3)
    plan = resolve_plan("apple", mlp_share=0.3, worker_backend="torch")
    assert (plan.engine, plan.worker_backend, plan.mlp_share) == ("mlx", "torch", 0.3)
    with pytest.raises(ValueError):
        resolve_plan("apple", worker_backend="metal")
    monkeypatch.setattr(plan_mod, "apple_engines", lambda: ["MLX on the GPU"])  # a Mac, as far as the check sees
    assert resolve_plan("apple").engine == "mlx"


def test_apple_engine_matches_the_cpu_plan(model_dir, window):
    model, codec, wave, obs, x, guided, unguided = window
    plan = resolve_plan("apple", mlp_share=0.3, worker_backend="torch")
    eng = build_engine(plan, model, codec, model_dir=model_dir, frames=T, samples=N)
    try:
        assert rel(eng.result(eng.encode_async(wave, urgent=True)), obs) < 1e-6  # the worker's codec
        eng.begin_window(wave, obs, ["a few words"])
        for got, want in zip(eng.velocities(x, 0.7, True), guided):  # so, u in the worker; sot in MLX
            assert rel(got, want) < 1e-5
        assert rel(eng.velocities(x, 0.3, False)[0], unguided[0]) < 1e-5
        assert eng.worker.alive and len(eng.warnings) == 1 and "torch worker" in eng.warnings[0]
    finally:
        eng.close()


@pytest.mark.slow
def test_end_to_end_restore_with_the_apple_plan(model_dir, wav, tmp_path):
    path = wav("in.wav", seconds=5.0)  # conftest's speech-like signal
    outs = {}
    for name, plan in (("cpu", "cpu"), ("apple", resolve_plan("apple", mlp_share=0.3, worker_backend="torch"))):
        with Restorer(model_dir, plan=plan, window=WindowConfig(seconds=3.0, overlap=0.5)) as r:
            rep = r.restore_file(path, tmp_path / f"{name}.wav", sampler="flash", steps=4, seed=3)
        assert rep.windows == 2
        outs[name] = torch.from_numpy(sf.read(tmp_path / f"{name}.wav", dtype="float32")[0])
    assert outs["apple"].shape == outs["cpu"].shape
    assert rel(outs["apple"], outs["cpu"]) < 1e-4
    assert any("torch worker" in w for w in rep.warnings)
