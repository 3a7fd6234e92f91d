"""Speed benchmark: realtime factor per sampler and plan on a fixed 3-minute recording; and a folder of
short clips against one file of the same length.

    python scripts/bench.py --out DIR [--plans cpu,split] [--samplers flash,pro]
                            [--baselines] [--seconds 180] [--model assets/model]
    python scripts/bench.py --out DIR --sections folder [--clips 100] [--device cuda]

Every configuration runs in a fresh process: the cold figure includes imports, model load and any
compilation; the warm figure restores the same file again with the loaded model. The breakdown
(read, encode, sampling, decode, write) comes from the pipeline's trace of the warm run; peak memory
is the process's peak RSS (and the GPU's peak allocation on CUDA). With --baselines each plan also
runs with the branches of guided steps unbatched, side by side in the same invocation. Results go
to OUT/results.json, OUT/results.md and OUT/rtf.png. realtime factor = audio seconds / wall seconds.

The folder section (`--sections folder`, or both: `engine,folder`) restores a folder of `--clips` clips of
2-10 s (the example, cut at other points; seeded) and one file of the clips end to end, the same audio,
each as a folder run does (`restore FOLDER -o OUT --sampler S`: the model's own steps for the sampler,
16 windows a sampler call on a GPU, 1 on the CPU), warm, in one process per plan, and records the
folder's realtime factor relative to the long file's (short files are packed into shared windows, so
this should stay near 1). Results go to OUT/folder.json and OUT/folder.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_recording(path: Path, seconds: float) -> None:
    """The shipped example (synthetic speech, damaged), tiled to `seconds`: the same file every time."""
    import numpy as np
    import soundfile as sf

    x, sr = sf.read(ROOT / "assets" / "example" / "interview.flac", dtype="float32")
    reps = int(np.ceil(seconds * sr / len(x)))
    sf.write(path, np.tile(x, reps)[: int(seconds * sr)], sr)


def child(cfg: dict) -> dict:
    """One configuration, in this (fresh) process."""
    t0 = time.perf_counter()
    import torch

    from restore.config import SamplerConfig
    from restore.engines.plan import resolve_plan
    from restore.pipeline.restorer import Restorer

    torch.set_num_threads(cfg["threads"]) if cfg.get("threads") else None
    plan = replace(resolve_plan(cfg["plan"], cfg["device"], cfg.get("mlp_share"), compile=cfg.get("compile", "off")),
                   batch_branches=cfg["batch_branches"])
    restorer = Restorer(cfg["model"], plan=plan, trace=True)
    load = time.perf_counter() - t0
    out = Path(cfg["tmp"]) / f"out_{os.getpid()}.wav"
    # "preset": the preset's step count, comparable across models (the figures measure engines); "model": the
    # model's own sampler as a user runs it (its steps, grid offsets and mix)
    own = cfg.get("steps") == "model"
    steps = restorer.files.samplers.get(cfg["sampler"], {}).get("steps") if own else None
    steps = steps or SamplerConfig.preset(cfg["sampler"]).steps
    kw = dict(sampler=cfg["sampler"], steps=None if own else steps, seed=0, overwrite=True,
              transcript=cfg.get("transcript"))
    cold = restorer.restore_file(cfg["input"], out, **kw)
    restorer.tracer.events.clear()
    warm = restorer.restore_file(cfg["input"], out, **kw)
    spans: dict[str, float] = {}
    batches = sum(1 for e in restorer.tracer.events if e["track"] == "pipeline" and e["name"].startswith("batch"))
    for e in restorer.tracer.events:
        name = e["name"]
        key = ("sampling" if name.startswith("batch") else name if name in ("read", "encode", "decode", "write")
               else None)
        if key and (e["track"] in ("io", "pipeline") or name in ("encode", "decode")):
            spans[key] = spans.get(key, 0.0) + e["dur"] / 1e6
    restorer.close()
    result = {**{k: cfg[k] for k in ("plan", "sampler", "batch_branches", "device")}, "compile": cfg.get("compile", "off"),
              "sampler_source": "model" if own else "preset", "audio_s": warm.seconds_audio, "load_s": load, "cold_s": load + cold.seconds_wall,
              "warm_s": warm.seconds_wall, "rtf_cold": warm.seconds_audio / (load + cold.seconds_wall),
              "rtf_warm": warm.seconds_audio / warm.seconds_wall, "breakdown_s": spans,
              "share": getattr(restorer.engine, "share", None),
              "swept_s": {str(k): v for k, v in getattr(restorer.engine, "swept", {}).items()},
              "steps": steps, "sampler_steps": batches * steps,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "threads": torch.get_num_threads()}
    result["step_ms"] = 1e3 * spans.get("sampling", 0.0) / max(result["sampler_steps"], 1)
    if torch.cuda.is_available():
        result["gpu_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def make_clips(folder: Path, count: int, low: float, high: float, seed: int = 0) -> tuple[list[Path], Path]:
    """`count` clips of `low`-`high` s (uniform, seeded), each from another point of the shipped example
    tiled, in FOLDER/clips; and FOLDER/long.flac, the clips end to end: the same audio in one file."""
    import numpy as np
    import soundfile as sf

    x, sr = sf.read(ROOT / "assets" / "example" / "interview.flac", dtype="float32")
    rng = np.random.default_rng(seed)
    tiled = np.tile(x, int(np.ceil(high * sr / len(x))) + 2)
    (folder / "clips").mkdir(parents=True, exist_ok=True)
    clips, parts = [], []
    for k in range(count):
        n = int(rng.uniform(low, high) * sr)
        start = int(rng.integers(len(x)))
        y = tiled[start : start + n]
        clips.append(folder / "clips" / f"clip{k:04d}.flac")
        sf.write(clips[-1], y, sr)
        parts.append(y)
    sf.write(folder / "long.flac", np.concatenate(parts), sr)
    return clips, folder / "long.flac"


def folder_child(cfg: dict) -> dict:
    """The folder section for one plan, in this (fresh) process: a warm-up, then the long file and the
    folder of clips, each restored as a folder run restores it, timed from the first read to the last write."""
    import torch

    from restore.engines.plan import resolve_plan
    from restore.pipeline.restorer import Restorer

    plan = resolve_plan(cfg["plan"], cfg["device"], cfg.get("mlp_share"), compile=cfg.get("compile", "off"))
    restorer = Restorer(cfg["model"], plan=plan, trace=True)
    batch = cfg.get("batch") or (16 if restorer.plan.device.startswith("cuda") else 1)
    out = Path(cfg["tmp"]) / "out"
    clips = [Path(p) for p in cfg["clips"]]
    kw = dict(sampler=cfg["sampler"], seed=0, overwrite=True, batch_rows=batch)

    def run(pairs) -> dict:
        restorer.tracer.events.clear()
        t0 = time.perf_counter()
        reports = [rep for _, _, rep in restorer.restore_files(pairs, **kw)]
        wall = time.perf_counter() - t0
        failed = [r for r in reports if isinstance(r, Exception)]
        if failed:
            raise SystemExit(f"restoring failed: {failed[0]}")
        audio = sum(r.seconds_audio for r in reports)
        batches = sum(1 for e in restorer.tracer.events if e["track"] == "pipeline" and e["name"].startswith("batch"))
        return {"files": len(reports), "audio_s": audio, "wall_s": wall, "rtf": audio / wall, "sampler_calls": batches}

    run([(clips[0], out / "warmup.flac")])  # model load, first-call costs
    jobs = {"long": [(Path(cfg["long"]), out / "long.flac")], "folder": [(c, out / "clips" / c.name) for c in clips]}
    runs: dict[str, list[dict]] = {"long": [], "folder": []}
    for k in range(cfg.get("repeats", 1)):  # alternating, so that a machine's drifting load meets both alike
        for name in (("long", "folder") if k % 2 == 0 else ("folder", "long")):
            runs[name].append(run(jobs[name]))
    restorer.close()
    long, folder = ({**r[0], "audio_s": sum(x["audio_s"] for x in r), "wall_s": sum(x["wall_s"] for x in r),
                     "rtf": sum(x["audio_s"] for x in r) / sum(x["wall_s"] for x in r),
                     "rtf_each": [x["rtf"] for x in r]} for r in (runs["long"], runs["folder"]))
    result = {"plan": restorer.plan.name, "device": restorer.plan.device, "sampler": cfg["sampler"],
              "steps": restorer.files.samplers.get(cfg["sampler"], {}).get("steps"), "batch_rows": batch,
              "threads": torch.get_num_threads(), "long": long, "folder": folder,
              "folder_over_long": folder["rtf"] / long["rtf"]}
    if torch.cuda.is_available():
        result["gpu"] = torch.cuda.get_device_name()
    return result


def write_folder_outputs(results: list[dict], out: Path, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "folder.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    lines = [f"# Folder benchmark: {meta['machine']}", "",
             f"`{meta['command']}` on {meta['date']}; {meta['clips']} clips of {meta['clip_seconds'][0]:g}-"
             f"{meta['clip_seconds'][1]:g} s against one file of the same audio end to end; warm, each restored as a "
             "folder run restores it; realtime factor = audio s / wall s (higher is faster).", "",
             "| plan | sampler | steps | windows a call | long file RTF | long file calls | folder RTF | folder calls "
             "| folder / long |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['plan']} | {r['sampler']} | {r['steps'] if r['steps'] is not None else 'preset'} | "
                     f"{r['batch_rows']} | {r['long']['rtf']:.2f}x | {r['long']['sampler_calls']} | "
                     f"{r['folder']['rtf']:.2f}x | {r['folder']['sampler_calls']} | {r['folder_over_long']:.2f} |")
    a = results[0]
    lines += ["", f"{a['folder']['files']} clips, {a['long']['audio_s'] / len(a['long']['rtf_each']):.0f} s of audio "
              f"in all; each restored {len(a['long']['rtf_each'])} time(s), alternating (RTF over all of them; "
              f"each time: long {', '.join(f'{x:.2f}x' for x in a['long']['rtf_each'])}, folder "
              f"{', '.join(f'{x:.2f}x' for x in a['folder']['rtf_each'])}). Calls: sampler loops, each over one window "
              "or a batch of `windows a call` windows, per restoration."]
    (out / "folder.md").write_text("\n".join(lines) + "\n")


def run_child(cfg: dict, what: str) -> dict:
    print(f"running {what} ...", flush=True)
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not line:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"{what} failed")
    return json.loads(line[0][7:])


def write_outputs(results: list[dict], out: Path, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    lines = [f"# Benchmark: {meta['machine']}", "", f"`{meta['command']}` on {meta['date']}; "
             f"{meta['audio_s']:.0f} s recording; realtime factor = audio s / wall s (higher is faster).", "",
             "| plan | sampler | steps | branches | compile | RTF warm | RTF cold | load s | sampling s | step ms | MLP share | encode s | decode s | read s | write s | peak RSS MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        b = r["breakdown_s"]
        own = " (the model's own)" if r.get("sampler_source") == "model" else ""
        lines.append(f"| {r['plan']} | {r['sampler']} | {r['steps']}{own} | {'batched' if r['batch_branches'] else 'one by one'} | "
                     f"{r.get('compile', 'off')} | "
                     f"{r['rtf_warm']:.2f}x | {r['rtf_cold']:.2f}x | {r['load_s']:.1f} | {b.get('sampling', 0):.1f} | "
                     f"{r.get('step_ms', 0):.1f} | {'—' if r.get('share') is None else format(r['share'], '.2f')} | "
                     f"{b.get('encode', 0):.2f} | {b.get('decode', 0):.2f} | {b.get('read', 0):.2f} | "
                     f"{b.get('write', 0):.2f} | {r['peak_rss_mb']:.0f} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['plan']}\n{r['sampler']}\n{'batched' if r['batch_branches'] else 'unbatched'}"
              + ("" if r.get("compile", "off") == "off" else f"\n{r['compile']}") for r in results]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(results)), 4))
    ax.bar(range(len(results)), [r["rtf_warm"] for r in results], label="warm")
    ax.bar(range(len(results)), [r["rtf_cold"] for r in results], width=0.4, label="cold (load + compile)")
    ax.axhline(1.0, color="gray", ls="--", lw=0.8)
    ax.set_xticks(range(len(results)), labels, fontsize=8)
    ax.set_ylabel("realtime factor (x)")
    ax.set_title(meta["machine"])
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "rtf.png", dpi=80)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench_out"))
    ap.add_argument("--plans", default="cpu")
    ap.add_argument("--samplers", default="flash,pro")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model", default=str(ROOT / "assets" / "model"))
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--baselines", action="store_true", help="also run guided steps unbatched (one forward per branch)")
    ap.add_argument("--steps", choices=("preset", "model"), default="preset", help="engine section: the presets' "
                    "step counts (comparable across models), or the model's own samplers as a restore runs them")
    ap.add_argument("--mlp-share", type=float, default=None, help="split plan: fixed share (default: sweep)")
    ap.add_argument("--compile", default="off", help="also run each cpu/cuda configuration compiled in this mode "
                    "(default, cuda-graphs), next to the eager one")
    ap.add_argument("--sections", default="engine", help="engine (plans and samplers on one recording), "
                    "folder (a folder of short clips against one long file), or both: engine,folder")
    ap.add_argument("--clips", type=int, default=100, help="folder section: clips in the folder")
    ap.add_argument("--clip-seconds", default="2,10", help="folder section: shortest,longest clip (s)")
    ap.add_argument("--repeats", type=int, default=1, help="folder section: times each of the two is restored "
                    "(alternating; the figures are totals)")
    ap.add_argument("--batch", type=int, default=None, help="folder section: windows a sampler call "
                    "(default: a folder run's, 16 on a GPU, 1 on the CPU)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        cfg = json.loads(args.child)
        print("RESULT " + json.dumps(folder_child(cfg) if cfg.get("section") == "folder" else child(cfg)), flush=True)
        return
    sections = args.sections.split(",")
    if not set(sections) <= {"engine", "folder"}:
        raise SystemExit(f"--sections takes engine and/or folder, got {args.sections}")
    machine = (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
               + (f", {__import__('torch').cuda.get_device_name()}" if __import__("torch").cuda.is_available() else ""))
    command = "python scripts/bench.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        if "engine" in sections:
            engine(args, Path(tmp), machine, command)
        if "folder" in sections:
            low, high = (float(v) for v in args.clip_seconds.split(","))
            clips, long = make_clips(Path(tmp) / "folder", args.clips, low, high)
            results = []
            for plan in args.plans.split(","):
                for sampler in args.samplers.split(","):
                    cfg = {"section": "folder", "plan": plan, "sampler": sampler, "device": args.device,
                           "model": args.model, "clips": [str(c) for c in clips], "long": str(long), "tmp": tmp,
                           "mlp_share": args.mlp_share, "batch": args.batch, "repeats": args.repeats}
                    r = run_child(cfg, f"folder {plan} {sampler}")
                    print(f"  long file {r['long']['rtf']:.2f}x realtime, folder {r['folder']['rtf']:.2f}x: "
                          f"{r['folder_over_long']:.2f} of the long file's", flush=True)
                    results.append(r)
            meta = {"machine": machine, "command": command, "date": time.strftime("%Y-%m-%d"), "clips": args.clips,
                    "clip_seconds": [low, high]}
            write_folder_outputs(results, args.out, meta)
            print(open(args.out / "folder.md").read())


def engine(args, tmp: Path, machine: str, command: str) -> None:
    """The engine section: each plan and sampler on the recording, cold and warm."""
    rec = tmp / "recording.wav"
    make_recording(rec, args.seconds)
    results = []
    for plan in args.plans.split(","):
        for sampler in args.samplers.split(","):
            compiles = ["off"] + ([args.compile] if args.compile != "off" and plan in ("cpu", "cuda") else [])
            for batched, compile in [(b, c) for b in ([True, False] if args.baselines and plan != "split"
                                                      else [True]) for c in compiles]:
                cfg = {"plan": plan, "sampler": sampler, "batch_branches": batched, "device": args.device,
                       "model": args.model, "input": str(rec), "tmp": str(tmp), "mlp_share": args.mlp_share,
                       "compile": compile, "steps": args.steps}
                r = run_child(cfg, f"{plan} {sampler} {'batched' if batched else 'unbatched'} compile={compile}")
                print(f"  warm {r['rtf_warm']:.2f}x realtime, cold {r['rtf_cold']:.2f}x, "
                      f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
                results.append(r)
    meta = {"machine": machine, "command": command, "date": time.strftime("%Y-%m-%d"), "audio_s": args.seconds}
    write_outputs(results, args.out, meta)
    print(open(args.out / "results.md").read())


if __name__ == "__main__":
    main()
