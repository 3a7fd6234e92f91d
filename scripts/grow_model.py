"""Deepen a trained model without changing what it computes (restore/training/grow.py), to continue
training it with more layers.

    python scripts/grow_model.py assets/model --layers 12 --out .stage/grow12
    python scripts/train.py --data /tmp/data --out /tmp/run --init .stage/grow12 ...

The output is a model folder like an export (float16 shards of at most 15 MiB, config.json with the new
depth); its info records the growth, plus --info. train.py takes the model settings from --init.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout, installed or not

from restore import weights  # noqa: E402
from restore.errors import InputError  # noqa: E402
from restore.training.grow import deepen  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="model folder (config.json + model-*.safetensors)")
    ap.add_argument("--layers", type=int, required=True, help="trunk layers of the grown model")
    ap.add_argument("--out", required=True, help="the grown model's folder (its old shards are replaced)")
    ap.add_argument("--info", default="{}", help="JSON added to the info in the output's config.json")
    args = ap.parse_args()
    if Path(args.out).resolve() == Path(args.model).resolve():
        sys.exit("--out must not be the model being grown")
    try:
        files = deepen(weights.load(args.model), args.layers)
    except InputError as e:
        sys.exit(f"error: {e}")
    paths = weights.save(args.out, files.model, files.codec, files.state, {**files.info, **json.loads(args.info)},
                         samplers=files.samplers or None)
    print(f"wrote {args.out}: {files.model.layers} layers, {len(paths)} shards")


if __name__ == "__main__":
    main()
