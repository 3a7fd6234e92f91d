"""Average models continued from the same weights into one (restore/training/average.py).

    python scripts/average_models.py .stage/r9/run_a/export .stage/r9/run_b/export --out .stage/r9/soup \
        [--shares 0.5,0.5] [--info '{"run": "r9-soup"}']

The output is a model folder like an export (float16 shards of at most 15 MiB, config.json); its info
records each source's share, run and steps, plus --info.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout, installed or not

from restore.errors import InputError  # noqa: E402
from restore.training.average import save_average  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="model folders (config.json + model-*.safetensors)")
    ap.add_argument("--out", required=True, help="the averaged model's folder (its old shards are replaced)")
    ap.add_argument("--shares", help="comma-separated shares, one per model, summing to 1 (default: equal)")
    ap.add_argument("--info", default="{}", help="JSON added to the info in the output's config.json")
    args = ap.parse_args()
    shares = [float(s) for s in args.shares.split(",")] if args.shares else None
    if Path(args.out).resolve() in {Path(m).resolve() for m in args.models}:
        sys.exit("--out must not be one of the models being averaged")
    try:
        paths = save_average(args.models, args.out, shares, json.loads(args.info))
    except InputError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {args.out}: {len(paths)} shards")


if __name__ == "__main__":
    main()
