"""Where the training batch producer spends its time: window assembly, each degradation, the rest;
and with --step, what the producer costs the training step it runs beside.

    python scripts/bench_data.py --data /tmp/data --batch 32            # on the GPU machine
    python scripts/bench_data.py --batch 4 --window 4 --device cpu      # synthetic data, anywhere
    python scripts/bench_data.py --step --batch 32                      # the step, with and without it
    python scripts/bench_data.py --step --switch-ms 5,1,0.2 --compile-mode reduce-overhead
    python scripts/bench_data.py --step --compile-mode reduce-overhead --model '{"layers": 12}'

At batch 32 the producer, not the GPU, bounded training until it was batched (docs/training.md). Each
part is timed with the device synchronised around it, over --n batches after two warm-up batches, so
the parts add up to a producer that runs alone; in training it overlaps the step.

On CUDA it also counts the host synchronisations one batch makes (CUDA's sync debug mode): each one
waits for every kernel queued before it, which beside the training step means behind the step's.

--step times the training step as training runs it (compiled, bf16) on one fixed batch with no producer
running, then fed by the background-thread producer (once per --switch-ms, Python's GIL switch interval),
and the producer alone. Where a fed step is slower than the fixed one by more than its wait, the producer
slows the step down rather than making it wait.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout, installed or not

from restore.training import degrade  # noqa: E402
from restore.training.batches import batches  # noqa: E402
from restore.training.data import to_int16, write_shards  # noqa: E402
from restore.training.trainer import TrainConfig, Trainer  # noqa: E402
from restore.config import CodecConfig, ModelConfig  # noqa: E402


def synthetic_data(folder: Path, seconds: float = 12.0, clips: int = 40) -> None:
    """A data folder in prepare_data.py's format: harmonic 'speech' clips, noise, two rooms."""
    rng = np.random.default_rng(0)
    sr = 16000
    t = np.arange(int(seconds * sr)) / sr
    speech = []
    for i in range(clips):
        f0 = 100 + 10 * i % 80 + 20 * np.sin(2 * np.pi * 0.5 * t)
        x = sum(np.sin(k * 2 * np.pi * np.cumsum(f0) / sr) / k for k in range(1, 12))
        x = 0.1 * x * np.clip(np.sin(2 * np.pi * 3 * t), 0, None) ** 2 + 0.002 * rng.standard_normal(len(t))
        speech.append((x.astype(np.float32), {"path": f"s{i}.wav", "speaker": f"spk{i % 8}", "text": "a b c"}))
    write_shards(folder, "speech", speech, 1 << 26)
    noise = [(0.1 * rng.standard_normal(sr * 30).astype(np.float32), {"path": f"n{i}.wav"}) for i in range(3)]
    write_shards(folder, "noise", noise, 1 << 26)
    rirs = []
    for i in range(2):
        h = np.zeros(sr // 2, np.float32)
        h[0] = 1.0
        h[200:] = 0.1 * np.exp(-np.arange(sr // 2 - 200) / 1500) * rng.standard_normal(sr // 2 - 200)
        rirs.append((h, {"path": f"r{i}.wav"}))
    write_shards(folder, "rir", rirs, 1 << 26)
    clean = 0.1 * rng.standard_normal((2, sr * 4)).astype(np.float32)
    np.savez(folder / "val.npz", clean=to_int16(clean), degraded=to_int16(clean))
    (folder / "val.json").write_text("[]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, help="a prepared data folder (default: synthetic)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--window", type=float, default=30.0, help="seconds")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--step", action="store_true", help="time the training step with and without the producer")
    ap.add_argument("--switch-ms", default="5", help="GIL switch intervals to time the fed step at (ms, comma-separated)")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode of the step (--step)")
    ap.add_argument("--model", default="{}", help='model settings as JSON (e.g. \'{"layers": 12}\'), as in train.py')
    ap.add_argument("--out", type=Path, help="also write the timings here as JSON")
    args = ap.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = Path(tmp)
            synthetic_data(data)
        cfg = TrainConfig(batch=args.batch, window_seconds=args.window, compile=args.step, bf16=args.step,
                          compile_mode=args.compile_mode)
        model = ModelConfig.from_dict({"precondition": "obs_skip", **json.loads(args.model)})
        tr = Trainer(cfg, model, CodecConfig(scale=3.0), data, Path(tmp) / "run", device=args.device)
        syncs = host_syncs(tr.maker)  # before any timing wrapper adds its own
        if args.step:
            switch = [float(v) for v in args.switch_ms.split(",")]
            report(args, step_timings(tr, args.n, sync, switch), syncs)
            return

        times: dict[str, float] = defaultdict(float)

        def timed(name, fn):
            def wrapper(*a, **k):
                sync()
                t0 = time.perf_counter()
                out = fn(*a, **k)
                sync()
                times[name] += time.perf_counter() - t0
                return out
            return wrapper

        tr.data.window_batch = timed("windows", tr.data.window_batch)
        for kind in degrade.KINDS:
            setattr(tr.maker.degrader, "_" + kind, timed("degrade." + kind, getattr(tr.maker.degrader, "_" + kind)))
        tr.maker.degrader._draw = timed("degrade: draw plans", tr.maker.degrader._draw)  # per clip, on the CPU
        tr.maker.degrader.apply = timed("degrade: apply (all)", tr.maker.degrader.apply)
        for _ in range(2):
            tr.batch()
        times.clear()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.n):
            tr.batch()
        sync()
        total = time.perf_counter() - t0

    per = {k: 1000 * v / args.n for k, v in sorted(times.items())}
    per["batch (all)"] = 1000 * total / args.n
    report(args, per, syncs)


def step_timings(tr: Trainer, n: int, sync, switch_ms: list[float]) -> dict[str, float]:
    """ms per step: on a fixed batch with no producer, fed by the thread producer beside it at each GIL
    switch interval (and the part of that spent waiting for a batch), and the producer alone. Steps are
    not synchronised one by one, as in training: the host runs ahead until the device's queue is full."""
    fixed = tr.batch()
    for _ in range(3):  # compile, forward and backward
        tr.train_step(fixed)
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        tr.train_step(fixed)
    sync()
    out = {"step, fixed batch, no producer": 1000 * (time.perf_counter() - t0) / n}
    it = batches(tr.maker, "thread", gpu_lock=tr.gpu_lock)  # as training makes them (graphs captured above)
    for _ in range(3):  # the queue fills
        tr.train_step(next(it)[0])
    default = sys.getswitchinterval()
    for ms in switch_ms:
        sys.setswitchinterval(ms / 1000)
        time.sleep(2.0)
        sync()
        wait = 0.0
        t0 = time.perf_counter()
        for _ in range(n):
            t1 = time.perf_counter()
            b = next(it)[0]
            wait += time.perf_counter() - t1
            tr.train_step(b)
        sync()
        out[f"step fed by the thread, switch {ms:g} ms"] = 1000 * (time.perf_counter() - t0) / n
        out[f"  of which waiting ({ms:g} ms)"] = 1000 * wait / n
    sys.setswitchinterval(default)
    it.close()  # stops the producer
    time.sleep(1.0)
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        tr.maker()
    sync()
    out["producer alone (in line)"] = 1000 * (time.perf_counter() - t0) / n
    return out


def host_syncs(make, n: int = 3) -> float | None:
    """Host synchronisations per batch (CUDA's sync debug mode warns at each), or None off CUDA."""
    if not torch.cuda.is_available():
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(n):
                make()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught) / n


def report(args, per: dict[str, float], syncs: float | None) -> None:
    one, many = ("step", "steps") if args.step else ("batch", "batches")
    print(f"device {args.device}, batch {args.batch} x {args.window:g} s, {args.n} {many}; ms per {one}:")
    for k, v in per.items():
        print(f"  {k:40s} {v:8.1f}")
    if syncs is not None:
        print(f"  {'host syncs per batch':40s} {syncs:8.1f}")
    if args.out:
        key = ({"mode": "step", "model": json.loads(args.model), "compile_mode": args.compile_mode, "ms": per}
               if args.step else {"ms_per_batch": per})
        args.out.write_text(json.dumps({"device": args.device, "batch": args.batch, "window_s": args.window, **key,
                                        "host_syncs_per_batch": syncs}, indent=2))


if __name__ == "__main__":
    main()
