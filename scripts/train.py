"""Train the restoration model (on the GPU machine, or briefly on a CPU to check the set-up).

    python scripts/train.py --data /tmp/data --out /tmp/run --minutes 9 [--resume] [--init assets/model]
        [--config '{"model": {"width": 384}, "train": {"batch": 16}}']

Each run stops after --minutes of wall time with a checkpoint (out/ckpt.pt; --resume continues it) and
exports the EMA weights to out/export as safetensors shards of at most 15 MiB plus config.json.

On several GPUs of one machine, as data-parallel replicas of one model (restore/training/replicas.py):

    torchrun --standalone --nproc_per_node 2 scripts/train.py --data /tmp/data --out /tmp/run ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from restore import weights  # noqa: E402
from restore.config import CodecConfig, ModelConfig  # noqa: E402
from restore.training.trainer import TrainConfig, Trainer  # noqa: E402
from restore.training.degrade import DegradeConfig  # noqa: E402

DEFAULT_CODEC = {"scale": 3.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", default=None, help="model folder to start from (e.g. the shipped model); its "
                    "model and codec settings and the damage mixture it was trained on (info.degrade_config) "
                    "are the run's unless --config sets them")
    ap.add_argument("--config", default="{}", help="JSON with optional model/codec/train/degrade sections")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--export-only", action="store_true", help="write out/export from the checkpoint and stop")
    args = ap.parse_args()
    over = json.loads(args.config)
    train = dict(over.get("train", {}))
    if args.minutes is not None:
        train["minutes"] = args.minutes
    if args.device == "cpu":
        train.setdefault("compile", False)
        train.setdefault("producer", "inline")  # a producer beside the step only takes turns with it on a CPU
    # the model and codec settings of --init (a grown model's depth, say), else the defaults; new models
    # train with the observation skip (docs/training.md, "What was learnt"); --config overrides
    init = weights.load(args.init) if args.init else None
    model = {**(init.model.to_dict() if init else {}), "precondition": "obs_skip", **over.get("model", {})}
    codec = {**(init.codec.to_dict() if init else DEFAULT_CODEC), **over.get("codec", {})}
    # a continued model keeps the mixture it learnt on, setting by setting, unless --config moves it
    degrade = {**(init.info.get("degrade_config", {}) if init else {}), **over.get("degrade", {})}
    trainer = Trainer(TrainConfig.from_dict(train), ModelConfig.from_dict(model), CodecConfig.from_dict(codec),
                      args.data, args.out,
                      device=args.device, init=init, degrade_cfg=DegradeConfig.from_dict(degrade))
    if args.resume and trainer.resume():
        print(f"resumed at step {trainer.step}", flush=True)
    if not args.export_only:
        trainer.run()
    if trainer.replicas.lead:
        paths = trainer.export(Path(args.out) / "export")
        print(f"step {trainer.step}; exported {[p.name for p in paths]}", flush=True)
    trainer.replicas.close()
    if trainer.replicas.world > 1:
        # Everything is written and the process group is gone: leave without the interpreter's teardown.
        # A replica finalising with gloo's worker threads still about can abort ("terminate called without
        # an active exception", SIGABRT; twice in CI on the CPU, the likely cause, not reproduced in 80
        # local runs), and torchrun then fails the whole run.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
