"""File and folder runs behind the CLI: output naming, skipping and resuming, reports, progress."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from . import audio
from .errors import RestoreError, UsageError
from .options import RestoreOptions
from .pipeline.restorer import Progress, Restorer

REPORT_NAME = "restore-report.json"


def list_audio(folder: Path) -> list[Path]:
    """Audio files under `folder`, recursively, in a stable order; hidden files and partial outputs skipped."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and Path(name).suffix.lower() in audio.AUDIO_EXTENSIONS:
                found.append(Path(root) / name)
    return found


def default_output(input: Path) -> Path:
    if input.is_dir():
        return input.with_name(input.name + "_restored")
    ext = input.suffix.lower() if input.suffix.lower() in audio.WRITE_FORMATS else ".flac"
    return input.with_name(input.stem + ".restored" + ext)


def folder_output(input_root: Path, output_root: Path, path: Path, format: str | None) -> Path:
    rel = path.relative_to(input_root)
    ext = ("." + format.lstrip(".").lower()) if format else path.suffix.lower()
    if ext not in audio.WRITE_FORMATS:
        ext = ".flac"  # inputs libsndfile reads but cannot write (e.g. .opus) come out as FLAC
    return output_root / rel.with_suffix(ext)


class ProgressLine:
    """One self-updating line on a terminal: file k/n, window, step."""

    def __init__(self, enabled: bool, files: int = 1):
        self.enabled, self.files, self.index = enabled, files, 0
        self.last = 0.0

    def file(self, done: int) -> None:
        """Files finished so far (a batched folder run works on several at once)."""
        self.index = done

    def __call__(self, p: Progress) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and p.step + 1 < p.steps:
            return
        self.last = now
        done = (p.window + (p.step + 1) / p.steps) / p.windows
        bar = "#" * int(done * 30)
        head = f"[{self.index}/{self.files} done] " if self.files > 1 else ""
        sys.stderr.write(f"\r{head}{Path(p.file).name[:40]} [{bar:<30}] window {p.window + 1}/{p.windows} "
                         f"step {p.step + 1}/{p.steps}  ")
        sys.stderr.flush()

    def end(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 100 + "\r")
            sys.stderr.flush()


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.chmod(tmp, audio.FILE_MODE)  # mkstemp makes it owner-only
    os.replace(tmp, path)


def finish_trace(restorer: Restorer | None, trace: Path | None, echo) -> None:
    if restorer is not None and trace is not None:
        restorer.tracer.write(trace)
        echo(f"trace: {trace} (open in ui.perfetto.dev or chrome://tracing)")


def run(input: Path, output: Path | None, options: RestoreOptions | None = None, *, model: Path | None = None,
        plan: str = "auto", device: str = "auto", format: str | None = None, overwrite: bool = False,
        report: Path | None = None, progress: bool = False, trace: Path | None = None,
        mlp_share: float | None = None, batch: int | None = None, compile: str = "off",
        cluster: str | None = None, echo: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> int:
    """Restore a file or a folder; returns the exit code (0 all restored, 1 some failed). `cluster`: run a
    folder on Ray (local, auto or ray://HOST:PORT; restore/pipeline/cluster.py)."""
    options = options or RestoreOptions()
    input = Path(input)
    if not input.exists():
        raise UsageError(f"{input}: no such file or folder")
    output = Path(output) if output is not None else default_output(input)
    if input.is_dir():
        return _run_folder(input, output, options, model=model, plan=plan, device=device, format=format,
                           overwrite=overwrite, report=report, progress=progress, echo=echo, trace=trace,
                           mlp_share=mlp_share, batch=batch, compile=compile, cluster=cluster)
    if cluster is not None:
        raise UsageError("--cluster applies to folder runs; give a folder as the input")
    if format:
        raise UsageError("--format applies to folder runs; give the output file's extension instead")
    audio.check_output(input, output, overwrite)
    audio.probe(input)  # fail on a bad input before loading the model
    restorer = Restorer(model, plan=plan, device=device, trace=trace is not None, mlp_share=mlp_share,
                        compile=compile)
    line = ProgressLine(progress)
    try:
        rep = restorer.restore_file(input, output, options, overwrite=overwrite, progress=line)
    finally:
        line.end()
        restorer.close()  # plans with a worker process: stop it and free its shared memory
    finish_trace(restorer, trace, echo)
    for w in rep.warnings:
        echo(f"warning: {w}")
    echo(f"restored {input} -> {output} ({rep.seconds_audio:.1f} s of audio in {rep.seconds_wall:.1f} s, "
         f"{rep.realtime:.2f}x realtime)")
    if report:
        write_json(report, {"files": [{"status": "restored", **rep.to_dict()}]})
    return 0


def _run_folder(input: Path, output: Path, options: RestoreOptions, *, model, plan, device, format, overwrite,
                report, progress, echo, trace=None, mlp_share=None, batch: int | None = None,
                compile: str = "off", cluster: str | None = None) -> int:
    out_root = output.resolve()
    if out_root == input.resolve():
        raise UsageError(f"{output}: the output folder is the input folder; choose another so the inputs are kept")
    # an output folder inside the input folder: its outputs are not inputs (else a resumed run restores them)
    files = [f for f in list_audio(input) if out_root not in f.resolve().parents]
    if not files:
        raise UsageError(f"{input}: the folder holds no audio files ({', '.join(sorted(audio.WRITE_FORMATS))}, ...)")
    if output.exists() and not output.is_dir():
        raise UsageError(f"{output}: is a file; a folder input needs an output folder")
    if format and "." + format.lstrip(".").lower() not in audio.WRITE_FORMATS:
        raise UsageError(f"--format {format}: cannot write that; use one of {', '.join(sorted(audio.WRITE_FORMATS))}")
    if cluster is not None:
        from .pipeline import cluster as cluster_mod  # Ray is imported there, when a run starts on it
        cluster_mod.check_address(cluster)
        if trace is not None:
            raise UsageError("--trace records one process; it is not available with --cluster")
    run = FolderRun(input, output, report or output / REPORT_NAME, options, echo)
    run.plan([(f, folder_output(input, output, f, format)) for f in files], overwrite)
    if cluster is not None:
        restorer = cluster_mod.ClusterRestorer(cluster, model, plan=plan, device=device, batch=batch, compile=compile,
                                               mlp_share=mlp_share, echo=echo) if run.todo else None
    else:
        restorer = Restorer(model, plan=plan, device=device, trace=trace is not None, mlp_share=mlp_share,
                            compile=compile) if run.todo else None
    try:
        code = run.restore(restorer, ProgressLine(progress, len(run.todo)), batch)
    finally:
        if restorer is not None:
            restorer.close()  # also on Ctrl-C: stop the worker process, free its shared memory
    finish_trace(restorer, trace, echo)
    return code


class FolderRun:
    """The state of one folder run: what to do, what was done, and its JSON report."""

    def __init__(self, input: Path, output: Path, report_path: Path, options: RestoreOptions, echo):
        self.report_path, self.options, self.echo = report_path, options, echo
        self.todo: list[tuple[Path, Path]] = []
        self.entries: list[dict] = []
        self.skipped = self.failed = self.restored = 0
        self.seconds_audio = self.seconds_wall = 0.0
        self.summary = {"input": str(input), "output": str(output), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "settings": asdict(options), "files": self.entries}

    def plan(self, pairs: list[tuple[Path, Path]], overwrite: bool) -> None:
        """Sort (input, output) pairs into to-do, skipped (output exists) and clashing (two inputs, one
        output: e.g. a.wav and a.flac with --format flac), in one pass."""
        claimed: dict[Path, Path] = {}
        clashes = []
        for i, o in pairs:
            if o in claimed:
                clashes.append({"input": str(i), "output": str(o), "status": "failed",
                                "error": f"{i}: its output {o} is already the output of {claimed[o]}; "
                                         f"rename one of them or choose another --format"})
                continue
            claimed[o] = i
            if overwrite or not o.exists():
                self.todo.append((i, o))
            else:
                self.entries.append({"input": str(i), "output": str(o), "status": "skipped (output exists)"})
        self.skipped = len(self.entries)
        if self.skipped:
            self.echo(f"{self.skipped} of {len(pairs)} files already restored; skipping them (use --overwrite to redo)")
        for c in clashes:
            self.echo(f"error: {c['error']}")
        self.entries.extend(clashes)
        self.failed = len(clashes)

    def restore(self, restorer, line: ProgressLine, batch: int | None = None) -> int:
        started = time.perf_counter()
        batch_rows = batch or (16 if restorer is not None and restorer.plan.device.startswith("cuda") else 1)
        results = restorer.restore_files(self.todo, self.options, progress=line, overwrite=True,
                                         batch_rows=batch_rows) if restorer is not None else []
        for k, (src, dst, rep) in enumerate(results):
            line.file(k + 1)
            if isinstance(rep, RestoreError):
                self.failed += 1
                line.end()
                self.echo(f"error: {rep}")
                self.entries.append({"input": str(src), "output": str(dst), "status": "failed", "error": str(rep)})
            else:
                self.entries.append({"status": "restored", **rep.to_dict()})
                self.restored += 1
                self.seconds_audio += rep.seconds_audio
                for w in rep.warnings:
                    line.end()
                    self.echo(f"warning: {src}: {w}")
            write_json(self.report_path, self.summary)  # after every file: an interrupted run leaves a report
        self.seconds_wall = time.perf_counter() - started  # files overlap when batched: wall time of the run
        line.end()
        self.summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.summary["summary"] = {"restored": self.restored, "skipped": self.skipped, "failed": self.failed,
                                   "seconds_audio": round(self.seconds_audio, 2),
                                   "seconds_wall": round(self.seconds_wall, 2)}
        if restorer is not None and restorer.plan.device.startswith("cuda"):  # GPU memory, for benchmarks
            import torch
            self.summary["summary"]["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20)
        write_json(self.report_path, self.summary)
        rate = f", {self.seconds_audio / self.seconds_wall:.2f}x realtime" if self.seconds_wall else ""
        self.echo(f"{self.restored} restored, {self.skipped} skipped, {self.failed} failed{rate}; "
                  f"report: {self.report_path}")
        return 1 if self.failed else 0
