"""A run's model as its 8-bit move from the model it started from, and back (restore/training/delta.py).

On the GPU machine, after the run's export (one call brings back its 4 shards of at most 15 MiB):

    python scripts/model_delta.py pack /tmp/run/export --init /tmp/init --out $OUT/delta

Here, onto the same starting model:

    python scripts/model_delta.py unpack .stage/rN/delta --init assets/model --out .stage/rN/export
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout, installed or not

from restore.errors import InputError  # noqa: E402
from restore.training.delta import pack, unpack  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="write a model's move from its starting model")
    p.add_argument("model", help="the trained model's folder (an export)")
    u = sub.add_parser("unpack", help="rebuild a packed model onto its starting model")
    u.add_argument("packed", help="the packed folder (delta.json + delta-*.safetensors)")
    for s in (p, u):
        s.add_argument("--init", required=True, help="the model the run started from")
        s.add_argument("--out", required=True, help="the folder to write (its old shards are replaced)")
    args = ap.parse_args()
    try:
        if args.command == "pack":
            paths = pack(args.model, args.init, args.out)
            size = sum(p.stat().st_size for p in paths) / 2**20
            print(f"wrote {args.out}: {len(paths)} files, {size:.1f} MiB")
        else:
            r = unpack(args.packed, args.init, args.out)
            print(f"wrote {args.out}: {r['tensors']} tensors, each weight within {r['max_error']:.2e} of the run's")
    except InputError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
