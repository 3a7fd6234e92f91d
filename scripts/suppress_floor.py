"""Lower the steady background floor of every WAV/FLAC in a folder (restore/training/floor.py).

    python scripts/suppress_floor.py /tmp/devset/clean /tmp/systems/clean_floor12 --depth-db 12

What training with `TrainConfig.target_floor_db` does to the clean targets, applied to files, so that
its effect on the metrics can be measured (docs/training.md, "The targets' own noise floor").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout, installed or not

from restore.training.floor import suppress_floor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--depth-db", type=float, default=12.0)
    args = ap.parse_args()
    files = sorted(p for p in args.src.iterdir() if p.suffix.lower() in (".wav", ".flac"))
    if not files:
        raise SystemExit(f"{args.src}: no .wav or .flac files")
    args.dst.mkdir(parents=True, exist_ok=True)
    for p in files:
        audio, rate = sf.read(p, dtype="float32", always_2d=True)
        out = torch.stack([suppress_floor(torch.from_numpy(c.copy()), args.depth_db) for c in audio.T], 1)
        sf.write(args.dst / p.name, out.numpy(), rate, subtype="PCM_16")
    print(f"{len(files)} files -> {args.dst}")


if __name__ == "__main__":
    main()
