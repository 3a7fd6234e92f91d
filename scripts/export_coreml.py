"""Export the Neural Engine programs (text-free chunks and codec) for a model and window shape.

    python scripts/export_coreml.py [--model assets/model] [--seconds 30] [--rows 1]
                                    [--layers-per-chunk 4] [--mlp-blocks auto] [--out FOLDER] [--placement]

Functions for 1 and 2 rows are exported together (mono, and stereo restored per channel); --rows 3 or more
exports that batch size alone.

By default the programs go where the apple plan's worker looks for them (the on-disk cache, keyed by the
model's content and every shape setting), so a first restore does not pay for conversion. Conversion runs
on any OS (it is checked here: fp16 throughout, rank <= 4, static shapes); compiling, the placement check
(--placement: MLComputePlan, macOS 14.4+) and prediction need macOS.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from restore import weights
    from restore.config import WindowConfig
    from restore.engines.chunks import TextFreeBranches
    from restore.engines.coreml_export import batches_for, cache_key, cache_root, export, mlp_blocks_for
    from restore.pipeline.windows import Geometry

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="model folder (default: the shipped model)")
    ap.add_argument("--seconds", type=float, default=WindowConfig().seconds, help="window length (the compiled shape)")
    ap.add_argument("--overlap", type=float, default=WindowConfig().overlap)
    ap.add_argument("--rows", type=int, default=1, help="channel rows per window (2: stereo restored per channel)")
    ap.add_argument("--layers-per-chunk", type=int, default=4)
    ap.add_argument("--mlp-blocks", default="auto", help="MLP partitions per layer; auto: sized for the 32 MB SRAM")
    ap.add_argument("--out", type=Path, default=None, help="default: the worker's cache folder for these settings")
    ap.add_argument("--placement", action="store_true", help="compile and report MLComputePlan placement (macOS)")
    args = ap.parse_args()
    args.model = weights.find_model(args.model)

    files = weights.load(args.model)
    cfg, codec = files.model, files.codec
    frames = Geometry.from_seconds(args.seconds, args.overlap, codec.sample_rate, codec.hop).length // codec.hop
    auto = args.mlp_blocks == "auto"  # sized for one row, as the worker does
    blocks = mlp_blocks_for(cfg.width, cfg.intermediate, frames) if auto else int(args.mlp_blocks)
    batches = batches_for(args.rows)
    # the same key the worker computes (coreml_runtime.export_folder), so it finds these files
    key = cache_key(args.model, frames=frames, batches=batches, layers_per_chunk=args.layers_per_chunk,
                    mlp_blocks=blocks)
    out = args.out or cache_root() / key
    branches = TextFreeBranches(weights.build_model(files), args.layers_per_chunk, blocks, guard=True).eval()
    started = time.perf_counter()
    manifest = export(branches, codec, frames, out, batches)
    print(f"exported {len(manifest['chunks'])} chunks + codec ({frames} frames, batches {list(batches)}, "
          f"{blocks} MLP blocks) to {out} in {time.perf_counter() - started:.0f} s")
    for c in manifest["chunks"] + [manifest["codec"]]:
        print(f"  {c.get('file')}: functions {', '.join(c['functions'])}, weight blob {c['blob_bytes'] / 2**20:.2f} MiB"
              + (" (padded off a MiB multiple)" if c.get("padded") else ""))
    if args.placement:
        from restore.engines.coreml_runtime import load_programs
        *_, warnings = load_programs(out, args.rows)  # raises PlacementError on a refusal
        print("placement:", json.dumps(json.loads((out / "placement.json").read_text()), indent=1)
              if (out / "placement.json").exists() else "unchecked")
        for w in warnings:
            print("warning:", w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
