"""What the trunk can see and correct: the rank its width leaves it on the latents, by frequency band.

    python scripts/probe_rank.py .stage/data/val.npz assets/model [--bands 8]

The trunk reads the latents through linear input projections (`x_in`, and `c_in` for the observation)
and writes its correction through one linear output layer (`out`), all `width` wide. Where the width is
under the latent dimension, some directions of the latents can never be read or written. This probe
measures, on the validation windows at t = 1 (the one-step estimate the shipped sampler uses):
- error: the one-step estimate's relative error, per band and overall (as `probe_model.py`);
- unreachable: the part of it no output of the trunk could remove: the error of the best estimate whose
  network part lies in the span of the output layer (scaled per dimension as the skip scales it);
- unseen: the share of the observation latents outside the row space of `c_in`'s observation columns.
Shares are of the clean latents' energy in each band (the observation's for `unseen`); a projection
moves energy between bands, so a band's unseen share can pass 1. Overall, unreachable <= error: the
model's own estimate is one of those the output layer can reach.
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
from restore.sampling.precondition import skip_coefficients  # noqa: E402


def _by_bin(z: torch.Tensor) -> torch.Tensor:
    """(..., 2 * bins) latents -> (bins,) energy summed over real and imaginary parts and all frames."""
    e = z.double().square().reshape(-1, z.shape[-1]).sum(0)
    b = z.shape[-1] // 2
    return e[:b] + e[b:]


def _outside(basis_of: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """The part of z (..., D) outside the column space of basis_of (D, C)."""
    q, _ = torch.linalg.qr(basis_of.double())
    z = z.double()
    return z - (z @ q) @ q.T


@torch.no_grad()
def rank_probe(model, skip, x0: torch.Tensor, obs: torch.Tensor, degraded: torch.Tensor,
               eps: torch.Tensor, text_tokens: int) -> dict[str, torch.Tensor]:
    """Per-bin energies (bins,) of the clean latents, the one-step error, its unreachable part, the
    observation and its unseen part. x0, obs, eps (B, T, D); degraded (B, N) audio."""
    n = x0.shape[0]
    ids, mask = text_mod.batch([None] * n, text_tokens, "cpu")
    ctx = model.context(degraded, obs, torch.ones(n, dtype=torch.bool), ids, mask)
    t = torch.ones(n)
    raw = model.velocity(eps, t, ctx).float()
    x0_hat = eps - skip.velocity(raw, eps, t, obs, True)
    _, c = skip_coefficients(torch.tensor(1.0), skip.logvar[0].float().exp())
    w = model.out.weight.float()
    # x0_hat = base - c * (W h): without the trunk's part, base is what every output of the trunk moves from
    base = x0_hat + c * (raw - model.out.bias.float())
    d = obs.shape[-1]
    return {"clean": _by_bin(x0), "error": _by_bin(x0_hat - x0),
            "unreachable": _by_bin(_outside(c[:, None] * w, x0 - base)),
            "obs": _by_bin(obs), "unseen": _by_bin(_outside(model.c_in.weight.float()[:, :d].T, obs))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("val", help="the validation windows (val.npz of a prepared data folder)")
    ap.add_argument("model", help="model folder")
    ap.add_argument("--bands", type=int, default=8, help="equal-width frequency bands in the table")
    args = ap.parse_args()
    val = np.load(args.val)
    clean = torch.from_numpy(val["clean"].astype(np.float32) / 32768)
    deg = torch.from_numpy(val["degraded"].astype(np.float32) / 32768)
    files = weights.load(args.model)
    model, skip = weights.build_model(files).eval(), weights.build_skip(files)
    if skip is None:
        sys.exit("error: the probe needs a model with the observation skip")
    codec = build_codec(files.codec)
    x0, obs = codec.encode(clean), codec.encode(deg)
    eps = torch.randn(x0.shape, generator=torch.Generator().manual_seed(0))
    r = rank_probe(model, skip, x0, obs, deg, eps, files.model.text.max_tokens)
    bins, sr = len(r["clean"]), files.codec.sample_rate
    print(f"{args.model}: width {files.model.width}, latents {x0.shape[-1]}, {len(clean)} windows")
    print("| band (Hz) | clean energy share | one-step error | unreachable | observation unseen |")
    print("| --- | --- | --- | --- | --- |")
    edges = np.linspace(0, bins, args.bands + 1).round().astype(int)
    hz = lambda b: min(b * sr / 2 / (bins - 1), sr / 2)  # noqa: E731
    rows = [(lo, hi, f"{hz(lo):.0f}-{hz(hi):.0f}")
            for lo, hi in zip(edges[:-1], edges[1:])] + [(0, bins, "all")]
    for lo, hi, name in rows:
        s = {k: float(v[lo:hi].sum()) for k, v in r.items()}
        print(f"| {name} | {s['clean'] / float(r['clean'].sum()):.3f} | {s['error'] / s['clean']:.3f} | "
              f"{s['unreachable'] / s['clean']:.3f} | {s['unseen'] / s['obs']:.3f} |")


if __name__ == "__main__":
    main()
