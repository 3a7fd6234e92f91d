"""Where a restoration costs the recogniser's words: put the input back, one band or blend at a time.

For every clip of one degradation type in the given test sets, pocketsphinx transcribes the clean
clip (the reference), the degraded input, the restoration, and the restoration with one part of the
input put back: a frequency band (below 1 kHz, 1-3 kHz, above 3 kHz), the input's own band below a
band-limited clip's cut-off, or an even blend of the two. Prints each clip's errors and the mean WER
per variant (the same per-clip mean as `eval.run`'s "WER vs ASR of clean"). Transcripts go through
eval's metric cache (`--cache`), so the clean, degraded and restored files that `eval.run` has read
are not read again, and a second run reads nothing.

    python scripts/word_bands.py --testset /tmp/devset /tmp/devset2 /tmp/devset3 \
        --systems /tmp/systems/r24 /tmp/systems2/r24 /tmp/systems3/r24 --degradation bandlimit
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.asr import cached_transcribe, transcribe  # noqa: E402
from eval.audio import SAMPLE_RATE, load_audio  # noqa: E402
from eval.cache import MetricCache, default_cache_path  # noqa: E402
from eval.wer import word_errors  # noqa: E402


def band(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The part of x between lo and hi Hz (a brick-wall FFT mask over the whole clip)."""
    spec = np.fft.rfft(x)
    f = np.fft.rfftfreq(len(x), 1.0 / SAMPLE_RATE)
    return np.fft.irfft(np.where((f >= lo) & (f < hi), spec, 0), len(x))


def variants(degraded: np.ndarray, out: np.ndarray, cutoff: float | None) -> dict[str, np.ndarray]:
    def swap(lo, hi):
        return out - band(out, lo, hi) + band(degraded, lo, hi)
    v = {"degraded": degraded, "restored": out, "input <1k": swap(0, 1000),
         "input 1-3k": swap(1000, 3000), "input >3k": swap(3000, SAMPLE_RATE), "blend 50/50": 0.5 * (out + degraded)}
    if cutoff is not None:
        v["input below cut-off"] = swap(0, cutoff)
    return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testset", nargs="+", required=True, help="test sets (eval.make_testset folders)")
    ap.add_argument("--systems", nargs="+", required=True, help="one restored folder per test set, in order")
    ap.add_argument("--degradation", required=True, help="the manifest's degradation column, e.g. bandlimit")
    ap.add_argument("--cache", default=str(default_cache_path()), help="eval's metric cache (SQLite)")
    a = ap.parse_args(argv)
    if len(a.testset) != len(a.systems):
        ap.error("give one --systems folder per --testset")
    read = functools.partial(cached_transcribe, MetricCache(a.cache), recognise=transcribe)
    rows = []
    for testset, system in zip(map(Path, a.testset), map(Path, a.systems)):
        with open(testset / "manifest.csv", newline="") as fh:
            clips = [r for r in csv.DictReader(fh) if r["degradation"] == a.degradation]
        for r in clips:
            cid = r["clip_id"]
            ref = read(load_audio(testset / "clean" / f"{cid}.wav"))
            if not ref.strip():
                continue
            degraded = load_audio(testset / "degraded" / f"{cid}.wav")
            out = load_audio(system / f"{cid}.wav")[: len(degraded)]
            params = json.loads(r["params_json"])
            cutoff = next((p["cutoff_hz"] for p in params if "cutoff_hz" in p), None)
            errors = {k: word_errors(ref, read(x)).errors for k, x in variants(degraded, out, cutoff).items()}
            rows.append({"clip": f"{testset.name}/{cid}", "words": len(ref.split()), **errors})
            print(json.dumps(rows[-1]), flush=True)
    if not rows:
        print(f"no clip of type {a.degradation!r} with a recognised clean transcript", file=sys.stderr)
        return 1
    print(f"\nmean WER over {len(rows)} clips (%):")
    for k in [k for k in rows[0] if k not in ("clip", "words")]:
        present = [r for r in rows if k in r]
        print(f"  {k:22s} {100 * np.mean([r[k] / r['words'] for r in present]):5.1f}  ({len(present)} clips)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
