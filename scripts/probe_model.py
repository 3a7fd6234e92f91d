"""Probe a model on the validation windows: how well it estimates the clean latents at each t.

    python scripts/probe_model.py .stage/data/val.npz assets/model [/tmp/r2 ...]

For t in 1.0 ... 0.1: the relative error of the one-step estimate x0_hat = x_t - t v against the clean
latents, and the share of the input noise left in it (0: none; a model that cannot carry the noise
through its trunk leaves some). The degraded input's own latents as an estimate are the bar to beat.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from restore import text as text_mod  # noqa: E402
from restore import weights  # noqa: E402
from restore.codec import build_codec  # noqa: E402


@torch.no_grad()
def probe(model_dir: str, clean: torch.Tensor, deg: torch.Tensor) -> None:
    files = weights.load(model_dir)
    model, skip = weights.build_model(files), weights.build_skip(files)
    codec = build_codec(files.codec)
    n = clean.shape[0]
    x0, obs = codec.encode(clean), codec.encode(deg)
    ids, mask = text_mod.batch([None] * n, files.model.text.max_tokens, "cpu")
    ctx = model.context(deg, obs, torch.ones(n, dtype=torch.bool), ids, mask)
    energy = x0.square().mean()
    print(f"{model_dir}: observation as estimate: relative error {((obs - x0).square().mean() / energy):.3f}")
    g = torch.Generator().manual_seed(0)
    for t in (1.0, 0.9, 0.7, 0.5, 0.3, 0.1):
        eps = torch.randn(x0.shape, generator=g)
        xt = (1 - t) * x0 + t * eps
        tt = torch.full((n,), t)
        v = model.velocity(xt, tt, ctx)
        if skip is not None:
            v = skip.velocity(v, xt, tt, obs, True)
        x0h = xt - t * v
        err = ((x0h - x0).square().mean() / energy).item()
        leak = ((x0h * eps).sum() / eps.square().sum()).item()
        print(f"  t={t:.1f}: relative error {err:.3f}, noise left {leak:+.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("val", help="the validation windows (val.npz of a prepared data folder)")
    ap.add_argument("models", nargs="+", help="model folders to probe")
    args = ap.parse_args()
    val = np.load(args.val)
    n = min(3, len(val["clean"]))
    clean = torch.from_numpy(val["clean"][:n].astype(np.float32) / 32768)
    deg = torch.from_numpy(val["degraded"][:n].astype(np.float32) / 32768)
    for m in args.models:
        probe(m, clean, deg)


if __name__ == "__main__":
    main()
