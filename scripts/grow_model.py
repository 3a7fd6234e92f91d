"""Deepen or widen a trained model without changing what it computes (restore/training/grow.py), to
continue training it with more layers or a wider trunk.

    python scripts/grow_model.py assets/model --layers 12 --out .stage/grow12
    python scripts/grow_model.py assets/model --width 512 --out .stage/wide512
    python scripts/train.py --data /tmp/data --out /tmp/run --init .stage/grow12 ...

The output is a model folder like an export (float32 shards of at most 15 MiB: widening rescales weights,
and float16 would round the function away from the trained one's; config.json with the new shape); its
info records the growth, plus --info. train.py takes the model settings from --init. With both --layers
and --width, the model is deepened first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout, installed or not

from restore import weights  # noqa: E402
from restore.errors import InputError  # noqa: E402
from restore.training.grow import deepen, widen  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="model folder (config.json + model-*.safetensors)")
    ap.add_argument("--layers", type=int, help="trunk layers of the grown model")
    ap.add_argument("--width", type=int, help="trunk width of the grown model (a multiple of the head size)")
    ap.add_argument("--intermediate", type=int, help="MLP units with --width (default: the same ratio to the width)")
    ap.add_argument("--out", required=True, help="the grown model's folder (its old shards are replaced)")
    ap.add_argument("--info", default="{}", help="JSON added to the info in the output's config.json")
    args = ap.parse_args()
    if Path(args.out).resolve() == Path(args.model).resolve():
        sys.exit("--out must not be the model being grown")
    if args.layers is None and args.width is None:
        sys.exit("error: say how to grow: --layers, --width or both")
    try:
        files = weights.load(args.model)
        files = deepen(files, args.layers) if args.layers is not None else files
        files = widen(files, args.width, args.intermediate) if args.width is not None else files
    except InputError as e:
        sys.exit(f"error: {e}")
    paths = weights.save(args.out, files.model, files.codec, files.state, {**files.info, **json.loads(args.info)},
                         dtype=torch.float32, samplers=files.samplers or None)
    m = files.model
    print(f"wrote {args.out}: {m.layers} layers, width {m.width}, {m.heads} heads, MLP {m.intermediate}, "
          f"{sum(t.numel() for t in files.state.values()):,} parameters, {len(paths)} shards")


if __name__ == "__main__":
    main()
