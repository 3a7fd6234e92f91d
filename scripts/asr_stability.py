"""How much the recogniser's reading of clean clips changes under changes nobody would hear.

    python scripts/asr_stability.py /tmp/devset3 --delay 80 --noise-db 40 --noise-db 30 \
        --system r29=/tmp/id3/r29

For every clean clip of a test set (eval.make_testset layout) it reads the clip as it is and each
variant of it: delayed by --delay samples (silence put in front, the end cut so the length stays),
with white noise --noise-db below the clip's mean power, or the file of the same name in a --system
folder (e.g. a restoration of the clean clips themselves). It prints, per variant, the words that
change against the clip's own reading (word-weighted WER, %), over all clips and per speaker.
Readings go through eval's metric cache, so a second run decodes nothing new.
"""

from __future__ import annotations

import argparse
import csv
import functools
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.asr import cached_transcribe, transcribe  # noqa: E402
from eval.audio import load_audio  # noqa: E402
from eval.cache import MetricCache, default_cache_path  # noqa: E402
from eval.wer import normalise_text, word_errors  # noqa: E402


def variants(x: np.ndarray, clip_id: str, args, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for d in args.delay:
        out[f"delay {d}"] = np.concatenate([np.zeros(d, x.dtype), x[:len(x) - d]])
    for snr in args.noise_db:
        n = rng.standard_normal(len(x))
        out[f"noise {snr:g} dB"] = (x + n * np.sqrt(np.mean(x**2) / 10 ** (snr / 10))).astype(x.dtype)
    for name, folder in args.system:
        out[name] = load_audio(Path(folder) / f"{clip_id}.wav")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("testset", type=Path, help="test set folder with clean/ and manifest.csv")
    ap.add_argument("--delay", type=int, action="append", default=[], help="delay in samples (repeatable)")
    ap.add_argument("--noise-db", type=float, action="append", default=[],
                    help="white noise this many dB below the clip (repeatable)")
    ap.add_argument("--system", action="append", default=[], type=lambda s: s.split("=", 1),
                    help="NAME=FOLDER of files named like the clean clips (repeatable)")
    ap.add_argument("--cache", type=Path, default=None, help="metric cache (default: eval's)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if any(len(s) != 2 for s in args.system):
        ap.error("--system takes NAME=FOLDER")
    if not (args.delay or args.noise_db or args.system):
        ap.error("give at least one --delay, --noise-db or --system")
    manifest = args.testset / "manifest.csv"
    if not manifest.is_file():
        ap.error(f"{manifest} not found: give a folder made by eval.make_testset")
    rows = list(csv.DictReader(open(manifest, newline="")))
    cache = MetricCache(args.cache or default_cache_path())
    read = functools.partial(cached_transcribe, cache, recognise=transcribe)

    rng = np.random.default_rng(args.seed)
    totals: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for i, row in enumerate(rows):
        x = load_audio(args.testset / "clean" / f"{row['clip_id']}.wav")
        reference = read(x)
        n = len(normalise_text(reference).split())
        if n == 0:
            continue
        for name, y in variants(x, row["clip_id"], args, rng).items():
            errors = word_errors(reference, read(y)).errors
            for key in ("all", row.get("speaker", "?")):
                totals[name][key][0] += errors
                totals[name][key][1] += n
        print(f"\r{i + 1}/{len(rows)} clips", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    for name, by in totals.items():
        parts = [f"{k} {100 * e / w:.0f}%" for k, (e, w) in sorted(by.items(), key=lambda kv: kv[0] != "all")]
        print(f"{name}: " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
