"""python -m eval.baselines: classic denoisers to compare against, run over a folder of degraded files.

  python -m eval.baselines --degraded /tmp/devset/degraded --out /tmp/systems

writes /tmp/systems/noisereduce/<clip>.wav and /tmp/systems/rnnoise/<clip>.wav (16 kHz, float
WAV, same length and timing as the input), plus baselines.json with versions and settings.
Outputs newer than their input are kept (use --overwrite to redo them), so adding a baseline later
only runs that one, and rebuilding the test set redoes everything.
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


def noisereduce_denoise(x: np.ndarray, prop_decrease: float = 1.0) -> np.ndarray:
    """Spectral gating with noisereduce's defaults (non-stationary noise estimate), 16 kHz in/out.

    The default removes the estimated noise completely (prop_decrease 1.0), which also gates quiet
    speech; a smaller value is a gentler, often fairer baseline for the reference-based metrics.
    """
    import noisereduce

    y = noisereduce.reduce_noise(y=np.asarray(x, dtype=np.float32), sr=SAMPLE_RATE, n_jobs=1,
                                 prop_decrease=prop_decrease)
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


BASELINES = {"noisereduce": noisereduce_denoise, "rnnoise": rnnoise_denoise}  # the --only names


def run_baselines(degraded: str | Path, out: str | Path, names: list[str] | None = None,
                  overwrite: bool = False, quiet: bool = False,
                  noisereduce_prop_decrease: float = 1.0) -> dict[str, float]:
    """Process every audio file of `degraded` with each baseline into out/<folder>/<clip>.wav.

    The folder is the baseline's name; noisereduce with a non-default prop_decrease P goes to
    'noisereduce_pP' so differently configured outputs never share a folder. Outputs newer than
    their input are kept unless `overwrite`. Returns seconds spent per folder.
    """
    names = names or list(BASELINES)
    unknown = set(names) - set(BASELINES)
    if unknown:
        raise ValueError(f"unknown baselines {sorted(unknown)}; known: {', '.join(BASELINES)}.")
    if not 0.0 < noisereduce_prop_decrease <= 1.0:
        raise ValueError("the noisereduce prop_decrease must lie in (0, 1].")
    files = list_audio(degraded)
    out = Path(out)
    functions = {"rnnoise": rnnoise_denoise}
    nr_folder = "noisereduce" if noisereduce_prop_decrease == 1.0 else f"noisereduce_p{noisereduce_prop_decrease:g}"
    functions[nr_folder] = lambda x: noisereduce_denoise(x, noisereduce_prop_decrease)
    folders = [nr_folder if n == "noisereduce" else n for n in names]
    info_path = out / "baselines.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info.update({"degraded": str(Path(degraded).resolve()), "sample_rate": SAMPLE_RATE})
    seconds = {}
    for folder in folders:
        t0 = time.perf_counter()
        for i, (clip_id, path) in enumerate(files.items()):
            target = out / folder / f"{clip_id}.wav"
            # keep an output only if it is newer than its input (a rebuilt test set is redone)
            if target.exists() and not overwrite and target.stat().st_mtime >= path.stat().st_mtime:
                continue
            write_audio(target, functions[folder](load_audio(path)), subtype="FLOAT")
            if not quiet and (i + 1) % 20 == 0:
                print(f"[baselines] {folder}: {i + 1}/{len(files)}", file=sys.stderr, flush=True)
        seconds[folder] = time.perf_counter() - t0
        if folder == "rnnoise":
            info[folder] = {"version": f"pyrnnoise {metadata.version('pyrnnoise')}",
                            "settings": f"48 kHz via soxr_hq, delay of {RNNOISE_DELAY} samples removed"}
        else:
            info[folder] = {"version": f"noisereduce {metadata.version('noisereduce')}",
                            "settings": f"reduce_noise defaults (stationary=False), prop_decrease="
                                        f"{noisereduce_prop_decrease:g}"}
    out.mkdir(parents=True, exist_ok=True)
    info_path.write_text(json.dumps(info, indent=2))
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.baselines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--degraded", help="folder of degraded files")
    p.add_argument("--testset", help="test set folder (its degraded/ is used)")
    p.add_argument("--out", required=True, help="parent folder; one subfolder per baseline is written")
    p.add_argument("--only", default=",".join(BASELINES), help=f"comma-separated subset of {','.join(BASELINES)}")
    p.add_argument("--noisereduce-prop-decrease", type=float, default=1.0,
                   help="noisereduce's prop_decrease (default 1.0, its own default; other values go to "
                        "the folder noisereduce_pVALUE)")
    p.add_argument("--overwrite", action="store_true", help="recompute outputs that already exist")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    degraded = args.degraded or (Path(args.testset) / "degraded" if args.testset else None)
    if degraded is None:
        print("error: give --degraded DIR or --testset DIR.", file=sys.stderr)
        return 2
    try:
        seconds = run_baselines(degraded, args.out, [n.strip() for n in args.only.split(",") if n.strip()],
                                args.overwrite, args.quiet, args.noisereduce_prop_decrease)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        for name, s in seconds.items():
            print(f"[baselines] {name}: {s:.1f} s -> {Path(args.out) / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
