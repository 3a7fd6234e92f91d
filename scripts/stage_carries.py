"""Group staged training data into folders small enough for one transfer each to the GPU machine.

    python scripts/stage_carries.py .stage/data .stage/carry --max-mb 55

Writes .stage/carry/c1, c2, ... (hard links, no copies), each at most --max-mb, the index files in
the last one; each is carried in its own call and copied to /tmp/data there (docs/training.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-mb", type=float, default=55.0)
    args = ap.parse_args()
    limit = args.max_mb * 1024 * 1024
    files = sorted(args.data.iterdir(), key=lambda p: -p.stat().st_size)
    small = [p for p in files if p.suffix == ".json"]
    groups: list[list[Path]] = []
    for p in (p for p in files if p.suffix != ".json"):  # first fit, largest first
        for g in groups:
            if sum(q.stat().st_size for q in g) + p.stat().st_size <= limit:
                g.append(p)
                break
        else:
            groups.append([p])
    groups[-1] += small
    shutil.rmtree(args.out, ignore_errors=True)
    for i, g in enumerate(groups, 1):
        folder = args.out / f"c{i}"
        folder.mkdir(parents=True)
        for p in g:
            os.link(p, folder / p.name)
        print(f"{folder}: {sum(p.stat().st_size for p in g) / 2**20:.1f} MiB, {[p.name for p in g]}")


if __name__ == "__main__":
    main()
