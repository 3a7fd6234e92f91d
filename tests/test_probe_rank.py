"""scripts/probe_rank.py: the part of the one-step error a trunk's output layer cannot reach."""

import importlib.util
from pathlib import Path

import torch

from restore import text as text_mod
from restore import weights
from restore.codec import STFTCodec
from restore.config import CodecConfig

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("probe_rank", ROOT / "scripts" / "probe_rank.py")
probe_rank = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe_rank)


def _inputs(seed=0, frames=16):
    g = torch.Generator().manual_seed(seed)
    deg = torch.randn(2, frames * 256, generator=g) * 0.05
    obs = STFTCodec(CodecConfig(scale=3.0)).encode(deg)
    return deg, obs, torch.randn(obs.shape, generator=g)


def test_unreachable_is_the_error_outside_the_output_layers_span(live_model):
    files = weights.load(live_model)
    model, skip = weights.build_model(files).eval(), weights.build_skip(files)
    deg, obs, eps = _inputs()
    x0 = torch.randn(obs.shape, generator=torch.Generator().manual_seed(5))
    r = probe_rank.rank_probe(model, skip, x0, obs, deg, eps, 32)
    # width 64 against 514 latents: most of a random target is out of reach, and never more than the error
    assert 0.5 < r["unreachable"].sum() / r["clean"].sum() <= r["error"].sum() / r["clean"].sum()
    assert 0.5 < r["unseen"].sum() / r["obs"].sum() < 1
    # a clean target that some output of the trunk gives exactly: nothing is out of reach
    with torch.no_grad():
        n = obs.shape[0]
        ids, mask = text_mod.batch([None] * n, 32, "cpu")
        ctx = model.context(deg, obs, torch.ones(n, dtype=torch.bool), ids, mask)
        est = eps - skip.velocity(model.velocity(eps, torch.ones(n), ctx), eps, torch.ones(n), obs, True)
        _, c = probe_rank.skip_coefficients(torch.tensor(1.0), skip.logvar[0].float().exp())
        h = torch.randn(*obs.shape[:2], model.out.weight.shape[1], generator=torch.Generator().manual_seed(7))
        reachable = est - c * (h @ model.out.weight.float().T)
    r = probe_rank.rank_probe(model, skip, reachable, obs, deg, eps, 32)
    assert r["unreachable"].sum() / r["clean"].sum() < 1e-6 < r["error"].sum() / r["clean"].sum()
