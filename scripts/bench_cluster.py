"""Cluster benchmark: a local Ray runtime (`--cluster local`) against the plain folder run, on the same folder.

    python scripts/bench_cluster.py --out DIR [--device cuda] [--hours 1] [--file-seconds 600]
                                    [--sampler flash] [--batch N] [--model assets/model]

The folder holds files of `--file-seconds` each, `--hours` of audio in all: the shipped example (synthetic
speech, damaged), tiled, each file starting at another point of it. Each mode runs as the command a user
types (`python -m restore FOLDER -o OUT --sampler S --device D [--cluster local]`), in a fresh process
with the checkout on its path (restore need not be installed; Ray must be: `pip install "ray[data]==2.60.0"`).
Per mode: the process's wall time (imports, model load, the Ray runtime's start and the restoration), the
run's own wall time from its report (the files only), realtime factors of both, and the overhead of the
cluster run over the plain one. The outputs of the two are compared sample for sample (bit-identical on
the CPU, where the one sampling actor of a local runtime has this process's torch threads; on a GPU
bf16 kernels may be chosen per batch shape). Results go to OUT/results.json and OUT/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_folder(folder: Path, hours: float, file_seconds: float) -> float:
    """Files of `file_seconds` (the last one shorter) adding up to `hours`; returns the seconds of audio."""
    import numpy as np
    import soundfile as sf

    x, sr = sf.read(ROOT / "assets" / "example" / "interview.flac", dtype="float32")
    total = hours * 3600.0
    folder.mkdir(parents=True, exist_ok=True)
    k, done = 0, 0.0
    while done < total - 0.5:
        seconds = min(file_seconds, total - done)
        n = int(seconds * sr)
        start = (k * 7919 * sr // 10) % len(x)  # another point of the example for every file
        tiled = np.tile(np.roll(x, -start), int(np.ceil(n / len(x))) + 1)[:n]
        sf.write(folder / f"part{k:04d}.flac", tiled, sr)
        done += n / sr
        k += 1
    return done


def run_mode(name: str, folder: Path, out: Path, args) -> dict:
    cmd = [sys.executable, "-m", "restore", str(folder), "-o", str(out), "--sampler", args.sampler,
           "--device", args.device, "--model", args.model, "--quiet"]
    if args.batch:
        cmd += ["--batch", str(args.batch)]
    if name == "cluster":
        cmd += ["--cluster", "local"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    print(f"running {name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"{name} failed")
    summary = json.loads((out / "restore-report.json").read_text())["summary"]
    audio = summary["seconds_audio"]
    result = {"mode": name, "files": summary["restored"], "audio_s": audio, "process_s": wall,
              "run_s": summary["seconds_wall"], "rtf_process": audio / wall, "rtf_run": audio / summary["seconds_wall"]}
    print(f"  {result['rtf_run']:.2f}x realtime over the files, {result['rtf_process']:.2f}x with start-up "
          f"({wall:.1f} s)", flush=True)
    return result


def stage_rates(folder: Path, seconds: float, model: str) -> list[dict]:
    """The CPU side of one GPU's work, per core: the cluster's read and write stages (no Ray, no model
    run: the write is given the read's windows as if restored) on a file of `seconds` at 16 kHz mono
    and at 48 kHz stereo (the full-band join): audio seconds per second of this process's CPU time, which
    a shared machine's other work does not lower as it lowers wall-time figures."""
    import numpy as np
    import soundfile as sf

    from restore.options import RestoreOptions
    from restore.pipeline import cluster

    restorer = cluster.ClusterRestorer("local", model)
    options = RestoreOptions(sampler="flash")
    cfg, post = options.resolve(restorer.files.samplers, has_skip=restorer.files.model.precondition == "obs_skip")
    stage = dict(options=options, model_rate=restorer.sample_rate, geometry=restorer.geometry,
                 settings={**cfg.to_dict(), **post.to_dict()}, max_tokens=restorer.files.model.text.max_tokens,
                 overwrite=True)
    x, sr = sf.read(ROOT / "assets" / "example" / "interview.flac", dtype="float32")
    out = []
    for rate, channels in ((16000, 1), (48000, 2)):
        import soxr

        y = soxr.resample(np.tile(x, int(np.ceil(seconds * sr / len(x))))[: int(seconds * sr)], sr, rate)
        y = np.stack([y, np.roll(y, 4800)], axis=1)[:, :channels]
        src = folder / f"stage_{rate}_{channels}.flac"
        sf.write(src, y, rate)
        f = cluster._File(str(src), str(folder / "stage_out" / src.name), 0)
        unit = cluster._Unit([[(f, 0)]])
        t0 = time.process_time()
        row = cluster._read({"unit": unit}, **stage)
        t1 = time.process_time()
        unit.restored = [w.wave for w in unit.windows]  # as if restored
        cluster._write(row, **stage)
        t2 = time.process_time()
        assert f.error is None, f.error
        out.append({"input": f"{rate} Hz, {channels} ch, FLAC", "seconds": seconds,
                    "read_rtf": seconds / (t1 - t0), "write_rtf": seconds / (t2 - t1)})
        print(f"  {out[-1]['input']}: read {out[-1]['read_rtf']:.0f}x, write {out[-1]['write_rtf']:.0f}x realtime "
              f"per CPU second", flush=True)
    return out


def compare(a: Path, b: Path) -> dict:
    import numpy as np
    import soundfile as sf

    same, worst, n = 0, 0.0, 0
    for p in sorted(a.glob("*.flac")):
        x, _ = sf.read(p, dtype="float32")
        y, _ = sf.read(b / p.name, dtype="float32")
        n += 1
        if x.shape == y.shape and np.array_equal(x, y):
            same += 1
        worst = max(worst, float(np.abs(x - y).max()) if x.shape == y.shape else float("inf"))
    return {"files": n, "bit_identical": same, "max_abs_diff": worst}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench_cluster_out"))
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    ap.add_argument("--hours", type=float, default=1.0, help="audio in the folder (the issue asks for at least 1)")
    ap.add_argument("--file-seconds", type=float, default=600.0)
    ap.add_argument("--sampler", default="flash")
    ap.add_argument("--batch", type=int, default=None, help="windows per sampler call (default: the runs' own)")
    ap.add_argument("--model", default=str(ROOT / "assets" / "model"))
    ap.add_argument("--stage-seconds", type=float, default=600.0, help="file length for the per-core CPU stage rates")
    args = ap.parse_args()
    import torch

    threads = torch.get_num_threads()  # what both runs' processes use (the stage rates below use one)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "in"
        audio = make_folder(folder, args.hours, args.file_seconds)
        print(f"{len(list(folder.iterdir()))} files, {audio / 3600:.3f} h of audio", flush=True)
        results = [run_mode(m, folder, Path(tmp) / m, args) for m in ("folder", "cluster")]
        same = compare(Path(tmp) / "folder", Path(tmp) / "cluster")
        print("the CPU stages, per CPU second:", flush=True)
        torch.set_num_threads(1)
        stages = stage_rates(Path(tmp), args.stage_seconds, args.model)
    plain, ray = results
    overhead = {"run": ray["run_s"] / plain["run_s"] - 1.0, "process": ray["process_s"] / plain["process_s"] - 1.0}
    machine = (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
               + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""))
    meta = {"machine": machine, "command": "python scripts/bench_cluster.py " + " ".join(sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d"), "audio_s": audio, "file_seconds": args.file_seconds,
            "torch_threads": threads}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "results": results, "overhead": overhead,
                                                       "outputs": same, "cpu_stages": stages}, indent=2))
    lines = [f"# Cluster benchmark: {machine}", "",
             f"`{meta['command']}` on {meta['date']}; {same['files']} files, {audio / 3600:.3f} h of audio; "
             f"realtime factor = audio s / wall s. 'run s' is the report's: the plain run's starts after its "
             f"model is loaded, the cluster run's includes starting Ray and its actors (each loads the model); "
             f"'process s' is the whole command for both.", "",
             "| mode | files | RTF (files) | RTF (with start-up) | run s | process s |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['mode']} | {r['files']} | {r['rtf_run']:.2f}x | {r['rtf_process']:.2f}x | "
                     f"{r['run_s']:.1f} | {r['process_s']:.1f} |")
    lines += ["", f"Cluster over folder: {overhead['run']:+.1%} run time, {overhead['process']:+.1%} process time. "
              f"Outputs: {same['bit_identical']} of {same['files']} bit-identical, largest difference "
              f"{same['max_abs_diff']:.3g}.", "",
              f"CPU stages, audio seconds per CPU second (one {args.stage_seconds:.0f} s file each, one thread):", "",
              "| input | read (decode, measure, resample, cut) | write (stitch, resample, join, level, encode) |",
              "| --- | --- | --- |"]
    lines += [f"| {r['input']} | {r['read_rtf']:.0f}x | {r['write_rtf']:.0f}x |" for r in stages]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
