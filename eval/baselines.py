"""python -m eval.baselines: classic denoisers to compare against, run over a folder of degraded files.

  python -m eval.baselines --degraded /tmp/devset/degraded --out /tmp/systems

writes /tmp/systems/noisereduce/<clip>.wav and /tmp/systems/rnnoise/<clip>.wav (16 kHz, float
WAV, same length and timing as the input), plus baselines.json with versions and settings.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from . import SAMPLE_RATE
from .audio import list_audio, load_audio, write_audio

RNNOISE_RATE = 48000
# RNNoise's output lags its input by two 10 ms frames at 48 kHz (measured with pyrnnoise 0.4.5's
# librnnoise: the cross-correlation of output and input peaks at 960 samples). We drop that delay
# so outputs line up with the reference, as a real integration would; tests check the alignment.
RNNOISE_DELAY = 960


def noisereduce_denoise(x: np.ndarray) -> np.ndarray:
    """Spectral gating with noisereduce's defaults (non-stationary noise estimate), 16 kHz in/out."""
    import noisereduce

    y = noisereduce.reduce_noise(y=np.asarray(x, dtype=np.float32), sr=SAMPLE_RATE, n_jobs=1)
    return np.asarray(y, dtype=np.float32)[: len(x)]


def rnnoise_denoise(x: np.ndarray) -> np.ndarray:
    """RNNoise (pyrnnoise's bundled library) on a 16 kHz clip: resampled to 48 kHz, processed in
    480-sample frames with a fresh state, delay removed, resampled back; same length as the input."""
    import librosa
    from pyrnnoise import rnnoise

    frame = rnnoise.FRAME_SIZE
    up = librosa.resample(np.asarray(x, dtype=np.float32), orig_sr=SAMPLE_RATE, target_sr=RNNOISE_RATE,
                          res_type="soxr_hq")
    # RNNoise expects 16-bit sample values as floats. Padding at the end flushes the delayed tail.
    total = len(up) + RNNOISE_DELAY
    buf = np.zeros(-(-total // frame) * frame, dtype=np.float32)
    buf[: len(up)] = up * 32768.0
    out = np.empty_like(buf)
    state = rnnoise.create()
    try:
        pointer = ctypes.POINTER(ctypes.c_float)
        for i in range(0, len(buf), frame):
            chunk = np.ascontiguousarray(buf[i : i + frame])
            rnnoise.lib.rnnoise_process_frame(state, chunk.ctypes.data_as(pointer), chunk.ctypes.data_as(pointer))
            out[i : i + frame] = chunk
    finally:
        rnnoise.destroy(state)
    aligned = out[RNNOISE_DELAY : RNNOISE_DELAY + len(up)] / 32768.0
    down = librosa.resample(aligned, orig_sr=RNNOISE_RATE, target_sr=SAMPLE_RATE, res_type="soxr_hq")
    y = np.zeros(len(x), dtype=np.float32)
    y[: min(len(x), len(down))] = down[: len(x)]
    return y


BASELINES = {"noisereduce": noisereduce_denoise, "rnnoise": rnnoise_denoise}


def run_baselines(degraded: str | Path, out: str | Path, names: list[str] | None = None,
                  overwrite: bool = False, quiet: bool = False) -> dict[str, float]:
    """Process every audio file of `degraded` with each baseline into out/<name>/<clip>.wav.

    Existing outputs are kept unless `overwrite`. Returns seconds spent per baseline.
    """
    names = names or list(BASELINES)
    unknown = set(names) - set(BASELINES)
    if unknown:
        raise ValueError(f"unknown baselines {sorted(unknown)}; known: {', '.join(BASELINES)}.")
    files = list_audio(degraded)
    out = Path(out)
    seconds = {}
    for name in names:
        t0 = time.perf_counter()
        folder = out / name
        for i, (clip_id, path) in enumerate(files.items()):
            target = folder / f"{clip_id}.wav"
            if target.exists() and not overwrite:
                continue
            write_audio(target, BASELINES[name](load_audio(path)), subtype="FLOAT")
            if not quiet and (i + 1) % 20 == 0:
                print(f"[baselines] {name}: {i + 1}/{len(files)}", file=sys.stderr, flush=True)
        seconds[name] = time.perf_counter() - t0
    info = {"degraded": str(Path(degraded).resolve()), "sample_rate": SAMPLE_RATE,
            "noisereduce": {"version": metadata.version("noisereduce"),
                            "settings": "reduce_noise defaults (stationary=False, prop_decrease=1.0)"},
            "rnnoise": {"version": f"pyrnnoise {metadata.version('pyrnnoise')}",
                        "settings": f"48 kHz via soxr_hq, delay {RNNOISE_DELAY} samples removed"}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "baselines.json").write_text(json.dumps({k: v for k, v in info.items()
                                                    if k not in BASELINES or k in names}, indent=2))
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.baselines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--degraded", help="folder of degraded files")
    p.add_argument("--testset", help="test set folder (its degraded/ is used)")
    p.add_argument("--out", required=True, help="parent folder; one subfolder per baseline is written")
    p.add_argument("--only", default=",".join(BASELINES), help=f"comma-separated subset of {','.join(BASELINES)}")
    p.add_argument("--overwrite", action="store_true", help="recompute outputs that already exist")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    degraded = args.degraded or (Path(args.testset) / "degraded" if args.testset else None)
    if degraded is None:
        print("error: give --degraded DIR or --testset DIR.", file=sys.stderr)
        return 2
    try:
        seconds = run_baselines(degraded, args.out, [n.strip() for n in args.only.split(",") if n.strip()],
                                args.overwrite, args.quiet)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        for name, s in seconds.items():
            print(f"[baselines] {name}: {s:.1f} s -> {Path(args.out) / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
