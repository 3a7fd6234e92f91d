#!/usr/bin/env python3
"""A test set that asks one question: does a noise coming and going, rather than the noise itself, cost
the restoration? Each clean clip of a dev test set (dev speakers) is mixed with a training noise three
ways, with the same recording, start and SNR each time: steady, in swells and in bursts
(restore/training/degrade.py, `p_noise_envelope`). The degradation column says which (noise-steady,
noise-swells, noise-bursts), so `eval.run` reports them side by side.

  python scripts/envelope_probe.py --devset /tmp/devset --data ../shared/data --out /tmp/envprobe
  restore /tmp/envprobe/degraded -o /tmp/envprobe_sys/shipped -q
  python -m eval.baselines --testset /tmp/envprobe --out /tmp/envprobe_sys --only rnnoise
  python -m eval.run --testset /tmp/envprobe /tmp/envprobe_sys/rnnoise /tmp/envprobe_sys/shipped --baseline rnnoise ...
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from eval.audio import load_audio, write_audio  # noqa: E402
from eval.make_testset import MANIFEST_COLUMNS  # noqa: E402
from restore.training.degrade import DegradeConfig, Degrader, _Draw  # noqa: E402

SPLIT = Path(__file__).resolve().parents[1] / "restore" / "training" / "split.json"
SHAPES = ("steady", "swells", "bursts")


def training_noises(data: Path) -> list[str]:
    """The noise recordings that training uses: every one in the data folder's manifest but the dev ones."""
    dev = set(json.loads(SPLIT.read_text())["dev_noises"])
    with open(data / "noise" / "manifest.csv", newline="") as f:
        return [r["path"] for r in csv.DictReader(f) if r["path"] not in dev]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devset", type=Path, required=True, help="a test set of eval.make_testset (its clean clips)")
    ap.add_argument("--data", type=Path, required=True, help="the data folder (noise/manifest.csv)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--clips", type=int, default=24)
    ap.add_argument("--snr", type=float, nargs=2, default=(0.0, 10.0), help="SNR range, dB")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    names = training_noises(args.data)
    deg = Degrader(DegradeConfig(snr_db=tuple(args.snr), p_synthetic_noise=0.0),
                   [torch.from_numpy(load_audio(args.data / n)) for n in names], noise_names=names)
    with open(args.devset / "manifest.csv", newline="", encoding="utf-8") as f:
        sources = sorted(csv.DictReader(f), key=lambda r: r["clip_id"])[: args.clips]
    rng = random.Random(args.seed)
    rows = []
    for src in sources:
        clean = load_audio(args.devset / "clean" / f"{src['clip_id']}.wav")
        base = deg._draw(_Draw(rng), ["noise"], len(clean))
        draw = _Draw(rng)
        for shape in SHAPES:
            plan = {"noise": dict(base["noise"])}
            if shape != "steady":
                plan["noise"].update(deg._draw_envelope(draw, shape))
            y, records = deg.apply(torch.from_numpy(clean)[None], [plan])
            y = y[0].numpy()
            y *= min(1.0, 0.99 / max(float(np.abs(y).max()), 1e-9))
            clip_id = f"{shape}_{src['clip_id']}"
            write_audio(args.out / "clean" / f"{clip_id}.wav", clean)
            write_audio(args.out / "degraded" / f"{clip_id}.wav", y)
            rows.append({**{k: src.get(k, "") for k in MANIFEST_COLUMNS}, "clip_id": clip_id,
                         "degradation": f"noise-{shape}", "kinds": "noise",
                         "params_json": json.dumps(records[0], sort_keys=True)})
    with open(args.out / "manifest.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=MANIFEST_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} clips ({len(sources)} clean clips x {', '.join(SHAPES)}) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
