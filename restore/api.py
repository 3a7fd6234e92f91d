"""File and folder runs behind the CLI: output naming, skipping and resuming, reports, progress, and the
clean-up of what killed runs left."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from . import audio
from .errors import DiskFullError, RestoreError, UsageError, option
from .options import RestoreOptions, at_least
from .pipeline.restorer import Progress, Restorer, choose_plan

REPORT_NAME = "restore-report.json"


def list_audio(folder: Path) -> tuple[list[Path], list[Path]]:
    """Files under `folder`, recursively, in a stable order, hidden ones skipped: (audio files that are
    read, audio files in formats that are not)."""
    found, not_read = [], []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            ext = Path(name).suffix.lower()
            if name.startswith("."):
                continue
            if ext in audio.AUDIO_EXTENSIONS:
                found.append(Path(root) / name)
            elif ext in audio.NOT_READ:
                not_read.append(Path(root) / name)
    return found, not_read


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
    """One self-updating line on a terminal: file k/n, window, step; before the first step, the phase
    that is running (loading the model, measuring, compiling...)."""

    def __init__(self, enabled: bool, files: int = 1):
        self.enabled, self.files, self.index = enabled, files, 0
        self.last = 0.0

    def file(self, done: int) -> None:
        """Files finished so far (a batched folder run works on several at once)."""
        self.index = done

    def status(self, text: str) -> None:
        """A phase that is starting, shown until the next update."""
        self._show(text[:99] + "...")

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
        self._show(f"{head}{Path(p.file).name[:40]} [{bar:<30}] window {p.window + 1}/{p.windows} "
                   f"step {p.step + 1}/{p.steps}")

    def _show(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r{text:<102}")
            sys.stderr.flush()

    def end(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 102 + "\r")
            sys.stderr.flush()


def write_json(path: Path, data: dict) -> None:
    """Atomically, as outputs are written; a full disk is said so."""
    text = json.dumps(data, indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = audio.temp_file(path)
        try:
            with open(tmp, "w") as f:
                f.write(text)
            os.chmod(tmp, audio.FILE_MODE)  # mkstemp makes it owner-only
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as e:
        raise (audio.disk_full(path, len(text), e)
               or RestoreError(f"{path}: cannot write the report ({e.strerror or e})")) from None


def report_history(path: Path) -> list[dict]:
    """The runs an existing report at `path` holds (itself and its own history), carried into the next
    report; refused where the file is something else, which a run would replace."""
    if not path.exists():
        return []
    try:
        old = json.loads(path.read_text())
        if not isinstance(old, dict) or not isinstance(old.get("files"), list):
            raise ValueError
    except (OSError, ValueError):
        raise UsageError(f"{path}: exists and is not a restore report; choose another {option('report')}") from None
    history = old.pop("history", [])
    return [*history, old] if isinstance(history, list) else [old]


def finish_trace(restorer: Restorer | None, trace: Path | None, echo) -> None:
    if restorer is not None and trace is not None:
        restorer.tracer.write(trace)
        echo(f"trace: {trace} (open in ui.perfetto.dev or chrome://tracing)")


def cleaned(removed: int, where: Path, echo) -> None:
    if removed:
        echo(f"removed {removed} temporary file(s) that an interrupted run left in {where}")


def run(input: Path, output: Path | None, options: RestoreOptions | None = None, *, model: Path | None = None,
        plan: str = "auto", device: str = "auto", format: str | None = None, overwrite: bool = False,
        report: Path | None = None, progress: bool = False, trace: Path | None = None,
        mlp_share: float | None = None, batch: int | None = None, compile: str = "off",
        cluster: str | None = None, echo: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> int:
    """Restore a file or a folder; returns the exit code (0 all restored, 1 some failed or not read).
    Everything that can be refused without the model is refused before it loads. `cluster`: run a folder
    on Ray (local, auto or ray://HOST:PORT; restore/pipeline/cluster.py)."""
    options = RestoreOptions.of(options)
    input = audio.as_path(input, "input")
    if not input.exists():
        raise UsageError(f"{input}: no such file or folder")
    output = audio.as_path(output, "output") if output is not None else default_output(input)
    if batch is not None:
        at_least("batch", batch, 1)
    if cluster is not None:
        from .pipeline import cluster as cluster_mod  # Ray is imported there, when a run starts on it
        cluster_mod.check_address(cluster)
        if not input.is_dir():
            raise UsageError(f"{option('cluster')} applies to folder runs; give a folder as the input")
        if trace is not None:
            raise UsageError(f"{option('trace')} records one process; it is not available with {option('cluster')}")
        # the plan is each sampling actor's to resolve on its own machine; what can be refused is refused here
        cluster_mod.check_plan(plan, device, mlp_share, compile)
        return _run_folder(input, output, options, model=model, plan=None, format=format, overwrite=overwrite,
                           report=report, progress=progress, echo=echo, batch=batch,
                           cluster=dict(address=cluster, plan=plan, device=device, mlp_share=mlp_share,
                                        compile=compile))
    chosen = choose_plan(plan, device, mlp_share, compile)
    if input.is_dir():
        return _run_folder(input, output, options, model=model, plan=chosen, format=format, overwrite=overwrite,
                           report=report, progress=progress, echo=echo, trace=trace, batch=batch)
    if format:
        raise UsageError(f"{option('format')} applies to folder runs; give the output file's extension instead")
    audio.check_output(input, output, overwrite)
    history = report_history(Path(report)) if report else []
    audio.scan(audio.probe(input))  # a silent or damaged input is refused before the model loads (read twice)
    cleaned(audio.remove_stale_temps(output.parent, output.name), output.parent, echo)
    line = ProgressLine(progress)
    restorer = None
    try:
        restorer = Restorer(model, plan=chosen, trace=trace is not None, status=line.status)
        rep = restorer.restore_file(input, output, options, overwrite=overwrite, progress=line)
    finally:
        line.end()
        if restorer is not None:
            restorer.close()  # plans with a worker process: stop it and free its shared memory
    finish_trace(restorer, trace, echo)
    for w in rep.warnings:
        echo(f"warning: {w}")
    echo(f"restored {input} -> {output} ({rep.seconds_audio:.1f} s of audio in {rep.seconds_wall:.1f} s, "
         f"{rep.realtime:.2f}x realtime)")
    if report:
        write_json(Path(report), {"files": [{"status": "restored", **rep.to_dict()}], "history": history})
    return 0


def _run_folder(input: Path, output: Path, options: RestoreOptions, *, model, plan, format, overwrite,
                report, progress, echo, trace=None, batch: int | None = None, cluster: dict | None = None) -> int:
    """`plan`: the chosen plan; or, with `cluster` (its address and the plan request), None: each
    sampling actor resolves the request on its own machine."""
    out_root = output.resolve()
    if out_root == input.resolve():
        raise UsageError(f"{output}: the output folder is the input folder; choose another so the inputs are kept")
    # an output folder inside the input folder: its outputs are not inputs (else a resumed run restores them)
    files, not_read = (
        [f for f in found if out_root not in f.resolve().parents] for found in list_audio(input))
    if not files:
        also = (f" ({len(not_read)} file(s) in formats it does not read, e.g. {not_read[0].name}: convert them "
                f"first, e.g. with ffmpeg)" if not_read else "")
        raise UsageError(f"{input}: the folder holds no audio files restore reads ({audio.READ_NAMES}){also}")
    if output.exists() and not output.is_dir():
        raise UsageError(f"{output}: is a file; a folder input needs an output folder")
    if format and "." + format.lstrip(".").lower() not in audio.WRITE_FORMATS:
        raise UsageError(f"{option('format', format)}: cannot write that; use one of "
                         f"{', '.join(sorted(audio.WRITE_FORMATS))}")
    report_path = Path(report) if report else output / REPORT_NAME
    run = FolderRun(input, output, report_path, options, echo)
    run.not_read(not_read)
    run.plan([(f, folder_output(input, output, f, format)) for f in files], overwrite)
    cleaned(audio.remove_stale_temps(output), output, echo)
    line = ProgressLine(progress, len(run.todo))
    restorer = None
    try:
        if run.todo and cluster is not None:
            from .pipeline.cluster import ClusterRestorer
            restorer = ClusterRestorer(cluster["address"], model, plan=cluster["plan"], device=cluster["device"],
                                       batch=batch, compile=cluster["compile"], mlp_share=cluster["mlp_share"],
                                       echo=echo)
        elif run.todo:
            restorer = Restorer(model, plan=plan, trace=trace is not None, status=line.status)
        code = run.restore(restorer, line, batch)
    finally:
        line.end()
        if restorer is not None:
            restorer.close()  # also on Ctrl-C: stop the worker process, free its shared memory
    finish_trace(restorer, trace, echo)
    return code


class FolderRun:
    """The state of one folder run: what to do, what was done, and its JSON report (which keeps the
    reports of earlier runs into the same place under "history")."""

    def __init__(self, input: Path, output: Path, report_path: Path, options: RestoreOptions, echo):
        self.report_path, self.options, self.echo = report_path, options, echo
        self.todo: list[tuple[Path, Path]] = []
        self.entries: list[dict] = []
        self.skipped = self.failed = self.restored = self.unread = 0
        self.seconds_audio = self.seconds_wall = 0.0
        self.report_failed = False
        self.summary = {"input": str(input), "output": str(output), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "settings": asdict(options), "files": self.entries, "history": report_history(report_path)}

    def not_read(self, paths: list[Path]) -> None:
        """Audio files in formats that are not read: listed in the report, and said once."""
        for p in paths:
            self.entries.append({"input": str(p), "status": "skipped (format not read)", "error": audio.not_read(p)})
        self.unread = len(paths)
        if paths:
            kinds = ", ".join(sorted({p.suffix.lower() for p in paths}))
            self.echo(f"warning: {len(paths)} file(s) skipped, their format is not read ({kinds}); convert them "
                      f"first, e.g. {audio.convert_hint(paths[0])} (the report lists them)")

    def plan(self, pairs: list[tuple[Path, Path]], overwrite: bool) -> None:
        """Sort (input, output) pairs into to-do, skipped (output exists) and clashing (two inputs, one
        output: e.g. a.wav and a.flac with --format flac), in one pass."""
        claimed: dict[Path, Path] = {}
        clashes = []
        skipped = []
        for i, o in pairs:
            if o in claimed:
                clashes.append({"input": str(i), "output": str(o), "status": "failed",
                                "error": f"{i}: its output {o} is already the output of {claimed[o]}; "
                                         f"rename one of them or choose another {option('format')}"})
                continue
            claimed[o] = i
            if overwrite or not o.exists():
                self.todo.append((i, o))
            else:
                skipped.append({"input": str(i), "output": str(o), "status": "skipped (output exists)"})
        self.entries.extend(skipped)
        self.skipped = len(skipped)
        if self.skipped:
            self.echo(f"{self.skipped} of {len(pairs)} files already restored; skipping them "
                      f"(use {option('overwrite', True)} to redo)")
        for c in clashes:
            self.echo(f"error: {c['error']}")
        self.entries.extend(clashes)
        self.failed = len(clashes)

    def save(self) -> None:
        """The report as it stands (after every file: an interrupted run leaves one); a report that cannot
        be written is said once and does not stop the restoring."""
        try:
            write_json(self.report_path, self.summary)
        except RestoreError as e:
            if not self.report_failed:
                self.echo(f"warning: {e}")
            self.report_failed = True

    def restore(self, restorer, line: ProgressLine, batch: int | None = None) -> int:
        started = time.perf_counter()
        if batch is None:
            batch = 16 if restorer is not None and restorer.plan.device.startswith("cuda") else 1
        results = restorer.restore_files(self.todo, self.options, progress=line, overwrite=True,
                                         batch_rows=batch) if restorer is not None else iter(())
        done: set[Path] = set()
        stopped = None
        for k, (src, dst, rep) in enumerate(results):
            line.file(k + 1)
            done.add(Path(src))
            if isinstance(rep, RestoreError):
                self.failed += 1
                line.end()
                self.echo(f"error: {rep}")
                self.entries.append({"input": str(src), "output": str(dst), "status": "failed", "error": str(rep)})
                if isinstance(rep, DiskFullError):  # the files after it would not fit either
                    stopped = f"stopped: no space left on device for {dst}"
            else:
                self.entries.append({"status": "restored", **rep.to_dict()})
                self.restored += 1
                self.seconds_audio += rep.seconds_audio
                for w in rep.warnings:
                    line.end()
                    self.echo(f"warning: {src}: {w}")
            self.save()
            if stopped:
                results.close()  # drops the files in progress, their temporary files with them
                break
        self.seconds_wall = time.perf_counter() - started  # files overlap when batched: wall time of the run
        line.end()
        left = [(i, o) for i, o in self.todo if Path(i) not in done]
        if stopped:
            for i, o in left:
                self.entries.append({"input": str(i), "output": str(o), "status": f"not restored ({stopped})"})
            self.echo(f"{stopped}; {len(left)} file(s) not restored: free some space and run the same command "
                      f"again to resume")
        self.summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.summary["summary"] = {"restored": self.restored, "skipped": self.skipped, "failed": self.failed,
                                   "not_read": self.unread, "not_restored": len(left) if stopped else 0,
                                   "seconds_audio": round(self.seconds_audio, 2),
                                   "seconds_wall": round(self.seconds_wall, 2)}
        if stopped:
            self.summary["stopped"] = stopped
        if restorer is not None and restorer.plan.device.startswith("cuda"):  # GPU memory, for benchmarks
            import torch
            self.summary["summary"]["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20)
        self.save()
        rate = f", {self.seconds_audio / self.seconds_wall:.2f}x realtime" if self.restored else ""
        unread = f", {self.unread} not read" if self.unread else ""
        self.echo(f"{self.restored} restored, {self.skipped} skipped, {self.failed} failed{unread}{rate}; "
                  f"report: {self.report_path}")
        return 1 if self.failed or self.unread or stopped else 0
