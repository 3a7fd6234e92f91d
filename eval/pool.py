"""python -m eval.pool: several test sets, and each system's outputs on them, as one test set, so that
paired intervals run over all their clips.

  python -m eval.pool /tmp/devset /tmp/devset2 --out /tmp/devset_both \\
      --system r7_s05=/tmp/systems/r7a_s05,/tmp/systems2/r7a_s05 \\
      --system r8_s05=/tmp/systems/r8a_s05,/tmp/systems2/r8a_s05
  python -m eval.run --testset /tmp/devset_both r7_s05=/tmp/devset_both/systems/r7_s05 \\
      r8_s05=/tmp/devset_both/systems/r8_s05 --baseline r7_s05 --out /tmp/pooled

Files are linked, not copied. Test set i's clips become s<i>_<clip id>, in its clean/ and degraded/
folders, its manifest rows and every system's folder alike. The metric cache keys on the audio, so
what was scored on the separate sets is not scored again.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path

from .audio import list_audio
from .inputs import read_manifest

MARK = "pool.json"  # written into every pooled folder; a folder without it is never written into


def pool(testsets: list[Path], out: Path, systems: dict[str, list[Path]] | None = None) -> dict:
    """Link `testsets` (and, per system name, one output folder per test set, in the same order) into
    `out` as one test set; returns what was pooled."""
    systems = systems or {}
    if len(testsets) < 2:
        raise ValueError("give at least two test sets to pool.")
    for name, folders in systems.items():
        if len(folders) != len(testsets):
            raise ValueError(f"system {name!r} has {len(folders)} folders for {len(testsets)} test sets; "
                             "give one per test set, in the same order.")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARK).is_file():
        raise ValueError(f"{out} already holds files that eval.pool did not make; choose another --out.")
    rows, columns = [], ["clip_id"]
    links: dict[Path, Path] = {}
    for i, ts in enumerate(map(Path, testsets)):
        prefix = f"s{i}_"
        if not (ts / "manifest.csv").is_file():
            raise ValueError(f"test set {ts} has no manifest.csv (eval.make_testset writes one).")
        for part in ("clean", "degraded"):
            if not (ts / part).is_dir():
                raise ValueError(f"test set {ts} has no {part}/ folder.")
            for clip, path in list_audio(ts / part).items():
                links[out / part / f"{prefix}{clip}{path.suffix}"] = path
        for clip, row in read_manifest(ts / "manifest.csv").items():
            rows.append({**row, "clip_id": prefix + clip})
            columns += [c for c in row if c not in columns]
        for name, folders in systems.items():
            for clip, path in list_audio(folders[i]).items():
                links[out / "systems" / name / f"{prefix}{clip}{path.suffix}"] = path
    for link, target in links.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(target.resolve(), link)
    with open(out / "manifest.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns, restval="")
        w.writeheader()
        w.writerows(rows)
    info = {"testsets": [str(Path(t).resolve()) for t in testsets], "clips": len(rows),
            "systems": {n: [str(Path(p).resolve()) for p in f] for n, f in systems.items()}}
    (out / MARK).write_text(json.dumps(info, indent=2))
    return info


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m eval.pool", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("testsets", nargs="+", type=Path, help="test set folders (eval.make_testset)")
    ap.add_argument("--out", required=True, type=Path, help="the pooled test set folder")
    ap.add_argument("--system", action="append", default=[],
                    help="NAME=DIR1,DIR2,...: a system's output folder on each test set, in order")
    args = ap.parse_args(argv)
    systems = {}
    for spec in args.system:
        name, _, dirs = spec.partition("=")
        if not name.strip() or not dirs:
            raise SystemExit(f"--system {spec!r}: write it as NAME=DIR1,DIR2,...")
        systems[name.strip()] = [Path(d) for d in dirs.split(",")]
    try:
        info = pool(args.testsets, args.out, systems)
    except ValueError as e:
        raise SystemExit(f"eval.pool: {e}") from None
    print(f"{info['clips']} clips from {len(info['testsets'])} test sets in {args.out}; "
          f"systems in {args.out / 'systems'}: {', '.join(systems) or 'none'}")


if __name__ == "__main__":
    main()
