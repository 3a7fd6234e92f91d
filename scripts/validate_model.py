"""The training log's validation figures for finished models, side by side on this machine.

    python scripts/validate_model.py .stage/data assets/model .stage/r10/soup [...]

Each model is loaded as a run's starting point (`Trainer(..., init=model)`) and scored by
`Trainer.validate` on the data folder's validation windows: flow loss at fixed t, the one-step
estimate's relative error, SI-SDR and log-spectral distance. Training scores its EMA weights the same
way on the GPU in bf16; here it runs in fp32 on the CPU (about 2.5 minutes a model on 2 cores), so the
figures compare models with each other, including an average of runs, which no training log scores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout, installed or not

from restore import weights  # noqa: E402
from restore.training.trainer import TrainConfig, Trainer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="a prepared data folder (its val.npz holds the validation windows)")
    ap.add_argument("models", nargs="+", help="model folders")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    cfg = TrainConfig(compile=False, bf16=False, producer="inline", batch=2)
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.models:
            files = weights.load(m)
            tr = Trainer(cfg, files.model, files.codec, args.data, tmp, device=args.device, init=files)
            scores = {k: round(v, 4) for k, v in tr.validate().items()}
            print(json.dumps({"model": m, **scores}), flush=True)


if __name__ == "__main__":
    main()
