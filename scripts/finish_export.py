"""Give a run's export its place in the line of models: its name, what it started from, the totals of
training behind it, and the init's sampler settings.

    python scripts/finish_export.py .stage/r11/run_a/export --run r11-deep --init .stage/r10/soup \
        [--how "grown to 12 layers"]

The exporter knows only its own run (`train_steps`, `train_seconds`); the model card and the next runs
need the whole history. From the init's config: its `run`, `total_train_steps` and
`total_train_seconds` (its own steps if it has no totals) and its `samplers`. Running it again gives the
same config (the totals are the init's plus the run's own, never added twice).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def finish(export: Path, run: str, init: Path, how: str | None = None) -> dict:
    """Update export/config.json in place; returns its new info."""
    path, init_cfg = export / "config.json", json.loads((init / "config.json").read_text())
    cfg = json.loads(path.read_text())
    info, base = cfg["info"], init_cfg.get("info", {})
    if "train_steps" not in info or "train_seconds" not in info:
        raise ValueError(f"{export}: not an export of scripts/train.py (no train_steps / train_seconds)")
    name = base.get("run")
    if not name:
        raise ValueError(f"{init}: its config names no run (info.run): finish that export first")
    steps = base.get("total_train_steps", base.get("train_steps", 0))
    seconds = base.get("total_train_seconds", base.get("train_seconds", 0.0))
    info.update(run=run, init=f"{name}{f', {how}' if how else ''} ({steps:,} steps, {seconds:,.1f} s)",
                total_train_steps=steps + info["train_steps"],
                total_train_seconds=round(seconds + info["train_seconds"], 1))
    if init_cfg.get("samplers"):
        cfg["samplers"] = init_cfg["samplers"]
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", type=Path, help="the run's export folder (its config.json is updated)")
    ap.add_argument("--run", required=True, help="the run's name")
    ap.add_argument("--init", type=Path, required=True, help="the model folder the run started from")
    ap.add_argument("--how", help="how the init was changed before the run (e.g. 'grown to 12 layers')")
    args = ap.parse_args()
    try:
        info = finish(args.export, args.run, args.init, args.how)
    except (ValueError, OSError, KeyError) as e:
        sys.exit(f"error: {e}")
    print(f"{args.export}: {info['run']} from {info['init']}; {info['total_train_steps']:,} steps, "
          f"{info['total_train_seconds']:,.1f} s in all")


if __name__ == "__main__":
    main()
