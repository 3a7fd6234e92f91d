"""Model size against CPU speed: one forward of one 30 s window for candidate trunk sizes (random
weights, fp32, this machine's threads), and the flash realtime factor it predicts.

    python scripts/size_tradeoff.py [--out docs/bench/cpu-2core-sizes.md] [--sizes 512x12x8x1344,512x16x8x1344]

flash runs 4 guided steps (3 branch rows) and 4 unguided (1 row) per window, and a window advances
28 s of audio (2 s overlap), so flash RTF ~ 28 / (16 x forward s); the measured default-model RTF in
docs/bench/cpu-2core (1.8-1.9x against a predicted ~2.4x) shows what codec, encoder and I/O add.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from restore import text as text_mod  # noqa: E402
from restore.config import CodecConfig, ModelConfig  # noqa: E402
from restore.model.dit import DiT, count_parameters  # noqa: E402

CANDIDATES = [(384, 8, 6, 1024), (512, 8, 8, 1408), (576, 8, 9, 1536), (640, 8, 10, 1792), (512, 12, 8, 1408)]


@torch.inference_mode()
def forward_seconds(cfg: ModelConfig, repeats: int = 3) -> float:
    model = DiT(cfg, CodecConfig(scale=3.0)).eval()
    frames, d = 1875, model.codec.latent_dim
    deg = torch.randn(1, frames * 256) * 0.05
    obs = torch.randn(1, frames, d)
    ids, mask = text_mod.batch([None], cfg.text.max_tokens, "cpu")
    ctx = model.context(deg, obs, torch.ones(1, dtype=torch.bool), ids, mask)
    x, t = torch.randn(1, frames, d), torch.tensor([0.5])
    model.velocity(x, t, ctx)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.velocity(x, t, ctx)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def parse_sizes(text: str) -> list[tuple[int, int, int, int]]:
    """'512x16x8x1344,384x12x6x1024' -> [(512, 16, 8, 1344), (384, 12, 6, 1024)]"""
    try:
        sizes = [tuple(int(v) for v in item.split("x")) for item in text.split(",") if item]
    except ValueError:
        sizes = []
    if not sizes or any(len(t) != 4 for t in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: give WIDTHxLAYERSxHEADSxMLP, comma-separated")
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--sizes", type=parse_sizes, default=CANDIDATES,
                    help="WIDTHxLAYERSxHEADSxMLP,... instead of the candidates above")
    args = ap.parse_args()
    lines = [f"# Model size against CPU speed ({torch.get_num_threads()} threads)", "",
             "`python scripts/size_tradeoff.py" + "".join(f" {a}" for a in sys.argv[1:]) + "`", "",
             "| width | layers | heads | MLP | parameters | forward s (1 window) | predicted flash RTF |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for width, layers, heads, inter in args.sizes:
        cfg = ModelConfig(width=width, layers=layers, heads=heads, intermediate=inter, precondition="obs_skip")
        s = forward_seconds(cfg)
        n = count_parameters(DiT(cfg, CodecConfig(scale=3.0)))
        lines.append(f"| {width} | {layers} | {heads} | {inter} | {n / 1e6:.1f} M | {s:.2f} | {28 / (16 * s):.2f}x |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
