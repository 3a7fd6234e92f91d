"""WER against the clean clip's reading with the two readings on the same or on offset frame grids.

    python scripts/wer_grids.py /tmp/pool34 --delay 80 --system r29 --system rnnoise

Each clean clip, degraded input and system output of a test set (eval.make_testset or eval.pool
layout, outputs in systems/NAME/) is read as it is and delayed by --delay samples. For the four
pairings of a clean reading with an output reading (both as is, both delayed, and the two across
grids) and for the two cross pairings together (eval's jitter-averaged WER when --delay is 80), it
prints each system's word-weighted WER, the input's, and the paired difference with its bootstrap
interval, over the clips whose reference is the reading of the clean clip. Readings go through
eval's metric cache (a delayed clip's reading is the 'asr' entry of its samples).
"""

from __future__ import annotations

import argparse
import csv
import functools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.asr import cached_transcribe, delayed, transcribe  # noqa: E402
from eval.audio import load_audio  # noqa: E402
from eval.bootstrap import paired_difference  # noqa: E402
from eval.cache import MetricCache, default_cache_path  # noqa: E402
from eval.wer import normalise_text, word_errors  # noqa: E402

PAIRINGS = {"same grid, as is": [(0, 0)], "same grid, both delayed": [(1, 1)],
            "clean as is, output delayed": [(0, 1)], "clean delayed, output as is": [(1, 0)],
            "both cross pairings": [(0, 1), (1, 0)]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("testset", type=Path, help="folder with clean/, degraded/, systems/ and manifest.csv")
    ap.add_argument("--delay", type=int, default=80, help="delay of the second reading in samples (80)")
    ap.add_argument("--system", action="append", required=True, help="a folder name under systems/ (repeatable)")
    ap.add_argument("--cache", type=Path, default=None, help="metric cache (default: eval's)")
    args = ap.parse_args(argv)
    if args.delay <= 0:
        ap.error("--delay must be a positive number of samples")
    manifest = args.testset / "manifest.csv"
    if not manifest.is_file():
        ap.error(f"{manifest} not found: give a folder made by eval.make_testset or eval.pool")
    rows = [r for r in csv.DictReader(open(manifest, newline="")) if r.get("reference_kind") == "asr_of_clean"]
    folders = {"input": args.testset / "degraded", **{s: args.testset / "systems" / s for s in args.system}}
    for name, folder in folders.items():
        if not folder.is_dir():
            ap.error(f"{folder} not found")
    cache = MetricCache(args.cache or default_cache_path())
    read = functools.partial(cached_transcribe, cache, recognise=transcribe)

    def readings(path: Path) -> list[str]:
        x = load_audio(path)
        return [read(x), read(delayed(x, args.delay))]

    # per system, per clip: {(i, j): (errors, reference words)}
    table: dict[str, list[dict]] = {name: [] for name in folders}
    for k, row in enumerate(rows):
        ref = readings(args.testset / "clean" / f"{row['clip_id']}.wav")
        for name, folder in folders.items():
            hyp = readings(folder / f"{row['clip_id']}.wav")
            table[name].append({(i, j): (word_errors(ref[i], hyp[j]).errors, len(normalise_text(ref[i]).split()))
                                for i in (0, 1) for j in (0, 1)})
        print(f"\r{k + 1}/{len(rows)} clips", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    def per_clip(name: str, pairs) -> tuple[np.ndarray, np.ndarray]:
        errors = np.array([np.mean([c[p][0] for p in pairs]) for c in table[name]])
        words = np.array([np.mean([c[p][1] for p in pairs]) for c in table[name]])
        return errors, words

    for label, pairs in PAIRINGS.items():
        e_in, w = per_clip("input", pairs)
        keep = w > 0
        parts = [f"input {100 * e_in.sum() / w.sum():.1f}%"]
        for name in args.system:
            e, _ = per_clip(name, pairs)
            d = paired_difference(e[keep] / w[keep], e_in[keep] / w[keep], w[keep])
            parts.append(f"{name} {100 * e.sum() / w.sum():.1f}% ({100 * d.mean:+.1f} "
                         f"[{100 * d.low:+.1f}, {100 * d.high:+.1f}])")
        print(f"{label}: " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
