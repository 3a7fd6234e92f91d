"""Folder runs on a Ray cluster: `restore FOLDER -o OUT --cluster local|auto|ray://HOST:PORT`.

One Ray Data pipeline, streamed (no stage waits for the whole folder):

    units (driver)  ->  read (CPU tasks)  ->  sample (actors)  ->  write (CPU tasks)  ->  reports (driver)

- **units**: the driver reads every input's header (`job.sizing`, as a local folder run does), packs
  the short files into shared windows with the same `windows.pack`, and puts consecutive groups of
  files into units of about one sampler batch of channel windows (a long file is a unit by itself).
  Outputs that exist were already skipped by the folder run (restore/api.py), so a killed run resumes
  where it stopped.
- **read** (one CPU task per unit): each file is opened, measured and cut into level-normalised windows
  at the model rate by the pipeline's own `FileJob`, with no output opened, and the windows of each
  group laid out by the same `job.group_windows`.
- **sample** (an actor pool: one actor per GPU, or per CPU slot where there is no GPU; each loads the
  model once): the unit's windows go through the same `Restorer` batches, sampler loop and codec as a
  local folder run, windows of several files in one call.
- **write** (one CPU task per unit): each file's parts are cut out of the restored windows, stitched,
  resampled, levelled and written by a `FileJob` given the levels the read measured, through the same
  atomic writer; its report names the node whose actor restored it.

Every file's frames draw their noise from its own seed and the windows are the same as a local run's,
so a file's audio does not depend on where it ran: on the CPU, with one window per sampler call (the
CPU default) the outputs are bit-identical to a local folder run's. A file that fails is reported and the others go on; tasks and actors that die are
retried by Ray (`RETRIES`). Ray is imported only here, and only when a folder run asks for a cluster.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import socket
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from .. import audio, errors, weights
from ..codec import build_codec
from ..config import WindowConfig
from ..engines.trace import Tracer
from ..errors import InputError, RestoreError, UsageError, option
from ..options import RestoreOptions
from .job import FileJob, FileReport, Window, group_windows, sizing
from .restorer import choose_plan
from .windows import Geometry, Part, pack

RETRIES = 3                # tries of a task, or of an actor's call, after its worker or node died
CPU_SLOT = 8               # most CPUs one sampling actor uses where the cluster has no GPU
INSTALL = "pip install 'restore[cluster]'"
CRASH_ONCE_ENV = "RESTORE_CLUSTER_CRASH_ONCE"  # tests: a marker path; the first sampling call exits its worker


def check_address(address: str) -> str:
    """`--cluster`: local (a Ray runtime in this process), auto (the cluster RAY_ADDRESS names, else the
    one running on this machine) or ray://HOST:PORT (a given cluster, through Ray Client)."""
    if address in ("local", "auto") or (address.startswith("ray://") and len(address) > len("ray://")):
        return address
    raise UsageError(f"{option('cluster')} must be local, auto or ray://HOST:PORT, got {address!r}")


def wants_gpu(plan: str, device: str, compile: str) -> bool:
    return (isinstance(device, str) and device.startswith("cuda")) or plan == "cuda" or compile == "cuda-graphs"


def check_plan(plan: str, device: str, mlp_share: float | None, compile: str) -> None:
    """The plan request, refused here as `choose_plan` refuses it, before a model loads or a cluster is
    joined; each sampling actor resolves it on its own machine. A GPU is the actors' to have: where this
    machine has none, a request for one is checked as if it had (the cluster's GPUs are counted when it
    is joined, `_resources`)."""
    choose_plan(plan, device, mlp_share, compile,
                cuda=True if wants_gpu(plan, device, compile) else None)


def _ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise UsageError(f"{option('cluster')} needs Ray, which is not installed: {INSTALL}") from None
    return ray


CLIENT_START_TRIES = 3  # Ray Client starts a server per connecting process; on a loaded head that start can fail


def _join(ray, address: str, kwargs: dict) -> None:
    """ray.init on a running cluster. A ray:// head that is up but failed to start this process's Ray
    Client server (it says "Starting Ray client server failed") is asked again, a moment later, a few
    times: the cluster is there, and the next start usually succeeds. Other failures are final at once."""
    for attempt in range(1, CLIENT_START_TRIES + 1):
        try:
            ray.init(address=address, **kwargs)
            return
        except ConnectionError as e:
            if attempt == CLIENT_START_TRIES or "client server failed" not in str(e).lower():
                raise
            time.sleep(2.0 * attempt)


@dataclass
class ClusterReport(FileReport):
    """A file's report from a cluster run: `node` is the host whose actor restored its windows;
    `seconds_wall` runs from its read to its write, time spent queueing between stages included."""
    node: str = ""


@dataclass
class _File:
    """One file on its way through the stages. `input` and `output` are absolute (a worker's working
    folder is its own); the report gives them as the folder run was given them."""
    input: str
    output: str
    seed: int
    given: tuple[str, str] = ("", "")
    seconds: float = 0.0                    # of audio, from the header
    error: str | None = None                # set by the stage where the file failed
    error_type: str = "InputError"
    started: float = 0.0                    # time.time() at the start of its read
    levels: audio.Levels | None = None
    count: int = 0                          # windows
    cut_windows: list[int] = field(default_factory=list)  # windows whose transcript share was cut (FileJob)
    node: str = ""
    warnings: list[str] = field(default_factory=list)

    def fail(self, e: BaseException) -> None:
        self.error_type = type(e).__name__ if isinstance(e, RestoreError) else "InputError"
        self.error = str(e) if isinstance(e, RestoreError) else f"{self.input}: {type(e).__name__}: {e}"


class _Unit:
    """Groups of files that windows.pack planned, which a read task reads, a sampler call samples and a
    write task writes: a Ray Data row holds one, as a pickled Python object. `windows` are the job's
    windows with each part's file given by its place in `files`, and without their audio once sampled;
    `restored` (rows, L) at the model rate, one per window. What a stage no longer needs is dropped
    before it moves on."""

    def __init__(self, groups: list[list[tuple[_File, int]]]):
        self.groups = groups
        self.files = [f for group in groups for f, _ in group]
        self.windows: list[Window] = []
        self.restored: list[np.ndarray] = []


# ---------------------------------------------------------------- the stages (run on the cluster)
def _read(row: dict, *, options: RestoreOptions, model_rate: int, geometry: Geometry, settings: dict,
          max_tokens: int, overwrite: bool) -> dict:
    """CPU task: open, measure and cut every file of a unit and lay out each group's windows, as a local
    folder run's FileJob and group_windows do (no output opened: the write task opens it, checking its
    disk's space where it writes)."""
    unit = row["unit"]
    place = {id(f): i for i, f in enumerate(unit.files)}
    for group in unit.groups:
        jobs: dict[int, _File] = {}
        opened = []
        for f, offset in group:
            f.started = time.time()
            job = None
            try:
                job = FileJob(f.input, f.output, options, model_rate=model_rate, geometry=geometry, settings=settings,
                              overwrite=overwrite, tracer=Tracer(enabled=False), max_tokens=max_tokens,
                              levels=f.levels, open_output=False)
                jobs[id(job)] = f
            except Exception as e:  # reported; the other files go on
                f.fail(e)
            opened.append((job, offset))
        try:
            for w in group_windows(opened):
                if w.wave is None:  # a read that failed part-way
                    jobs[id(w.parts[0].job)].fail(w.parts[0].job.failed)
                    continue
                parts = [Part(place[id(jobs[id(p.job)])], p.index, p.offset, p.length) for p in w.parts]
                unit.windows.append(Window(w.wave.numpy(), parts, w.texts))
        except Exception as e:
            for f in jobs.values():
                f.fail(e)
        for job, _ in opened:
            if job is not None:
                f = jobs[id(job)]
                f.levels, f.count, f.cut_windows = job.levels, job.count, list(job.cut_windows)
    failed = {place[id(f)] for f in unit.files if f.error is not None}
    unit.windows = [w for w in unit.windows if not {p.job for p in w.parts} <= failed]
    return row


class _Sampler:
    """Actor: loads the model once, then samples units of windows as a local folder run does."""

    def __init__(self, *, model: str | None, plan: str, device: str, compile: str, mlp_share: float | None,
                 batch: int | None, options: RestoreOptions, threads: int | None):
        from .restorer import Restorer

        if threads:
            torch.set_num_threads(threads)
        self.restorer = Restorer(model, plan=choose_plan(plan, device, mlp_share, compile))
        self.cfg, self.post = options.resolve(self.restorer.files.samplers, has_skip=self.restorer.skip is not None)
        self.rows = batch or (16 if self.restorer.plan.device.startswith("cuda") else 1)
        self.node = socket.gethostname()

    def __call__(self, batch: dict) -> dict:
        for unit in batch["unit"]:
            self._crash_once()
            self._sample(unit)
        return batch

    def _sample(self, unit: _Unit) -> None:
        from .restorer import _batched

        files = unit.files
        if not self.restorer.engine.masks and any(len(w.parts) > 1 for w in unit.windows):
            for f in files:  # (the driver packs unless --plan apple; `auto` found the apple plan here)
                f.fail(UsageError(f"{f.input}: this node's plan ({self.restorer.plan.name}) cannot restore files "
                                  f"that share a window; give {option('plan', 'cpu')} or cuda"))
            return
        windows = [Window(torch.from_numpy(np.array(w.wave)), [Part(files[p.job], p.index, p.offset, p.length)
                                                               for p in w.parts], w.texts) for w in unit.windows]
        warned = len(self.restorer.engine.warnings)
        try:
            for _, restored in self.restorer._pipeline(_batched(iter(windows), self.rows), self.cfg, self.post, None):
                unit.restored.extend(restored)
        except Exception as e:  # the unit's files are reported; the next unit goes on
            for f in files:
                if f.error is None:
                    f.fail(e)
            unit.restored = []
            return
        for w in unit.windows:
            w.wave = None
        for f in files:
            f.node = self.node
            f.warnings = list(self.restorer.engine.warnings[warned:])

    @staticmethod
    def _crash_once() -> None:
        """A worker that dies mid-run, for the tests of Ray's retries: exits the first time it is asked."""
        marker = os.environ.get(CRASH_ONCE_ENV)
        if marker:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            os._exit(1)


def _write(row: dict, *, options: RestoreOptions, model_rate: int, geometry: Geometry, settings: dict,
           max_tokens: int, overwrite: bool) -> list[dict]:
    """CPU task: stitch, resample, level and write each file of a unit atomically, as a local folder run's
    FileJob does (the deliver loop of Restorer._deliver): the disk's space checked before the file
    starts, a full disk reported as a DiskFullError (the folder run stops there); one report row per file.
    The read checked the output against `overwrite`: a retried write replaces what its own try left."""
    unit = row["unit"]
    parts: dict[int, list[tuple[Part, np.ndarray]]] = {}  # a file's parts and their windows, in order
    for w, out in zip(unit.windows, unit.restored):
        for p in w.parts:
            parts.setdefault(p.job, []).append((p, out))
    rows = []
    for i, f in enumerate(unit.files):
        if f.error is None:
            job = None
            try:
                job = FileJob(f.input, f.output, options, model_rate=model_rate, geometry=geometry, settings=settings,
                              overwrite=True, tracer=Tracer(enabled=False), max_tokens=max_tokens, levels=f.levels)
                job.cut_windows = f.cut_windows  # the windows were cut on the reading side
                for p, out in parts.get(i, []):
                    job.deliver(p.cut(out))
                rep = job.finish(f.warnings)
                rep.seconds_wall = time.time() - f.started
                fields_ = {k.name: getattr(rep, k.name) for k in fields(rep)}
                rows.append({"result": json.dumps({**fields_, "node": f.node, "given": f.given})})
                continue
            except Exception as e:
                if job is not None and job.out is not None:
                    job.abort()
                f.fail(e)
        rows.append({"result": json.dumps({"failed": f.error, "type": f.error_type, "input": f.input,
                                           "output": f.output, "given": f.given})})
    return rows


# ---------------------------------------------------------------- the driver
class ClusterRestorer:
    """Restores a folder's files on a Ray cluster; `restore_files` yields what `Restorer.restore_files`
    yields, so the folder run (restore/api.py) keeps its resuming, report and summary as they are."""

    def __init__(self, address: str, model: str | Path | None = None, *, plan: str = "auto", device: str = "auto",
                 batch: int | None = None, compile: str = "off", mlp_share: float | None = None, echo=None):
        self.address = check_address(address)
        model = None if model is None else audio.as_path(model, "model")
        self.files = weights.load(model)  # checked here, before a cluster is joined
        self.files.state.clear()  # the weights are the actors' to load; this process needs the settings
        self.model = os.path.abspath(model) if model is not None else None
        self.plan_name, self.device, self.batch, self.compile, self.mlp_share = plan, device, batch, compile, mlp_share
        self.echo = echo or (lambda s: print(s, file=sys.stderr))
        self.sample_rate = self.files.codec.sample_rate
        self.geometry = Geometry.of(WindowConfig(), self.sample_rate, build_codec(self.files.codec).hop)
        self.plan = _DriverPlan()
        self.started_ray = False
        self.pending: list[tuple[Path, Path]] = []

    # -- Ray
    def _connect(self):
        ray = _ray()
        if ray.is_initialized():  # a runtime the caller started (a notebook, the tests): used as it is
            return ray
        kwargs = dict(logging_level=logging.WARNING, log_to_driver=False)
        try:
            if self.address == "local":
                # the workers import this very `restore`, wherever it was imported from
                root = str(Path(__file__).resolve().parents[2])
                path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
                # "local" explicitly: left out, Ray would join the cluster RAY_ADDRESS names or `ray start` began
                ray.init(address="local", include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}},
                         **kwargs)
            else:
                _join(ray, self.address, kwargs)
        except ConnectionError as e:
            where = "RAY_ADDRESS" if self.address == "auto" else self.address
            raise UsageError(f"{option('cluster', self.address)}: no Ray cluster to join at {where} ({e})") from None
        self.started_ray = True
        return ray

    def _resources(self, ray) -> tuple[int, dict, int | None]:
        """How many sampling actors, what each one holds, and its torch threads (None: torch's default).
        A GPU each where the cluster has GPUs and the device allows. Else CPU slots of up to CPU_SLOT
        CPUs, with a quarter of the CPUs left for reading and writing, each slot's CPUs as its threads;
        but a local runtime without a GPU has one sampling actor with as many threads as this process:
        a local folder run's arithmetic, so that its outputs are bit-identical (torch's CPU kernels
        split their sums by thread: a file restored with 1 and with 2 threads differs in the last bit)."""
        res = ray.cluster_resources()
        gpus, cpus = int(res.get("GPU", 0)), max(1, int(res.get("CPU", 1)))
        if self.device != "cpu" and gpus > 0:  # each actor sees its own GPU as cuda
            return gpus, {"num_gpus": 1, "num_cpus": 1}, None
        if wants_gpu(self.plan_name, self.device, self.compile):
            what = (option("device", self.device) if self.device.startswith("cuda") else
                    option("plan", "cuda") if self.plan_name == "cuda" else option("compile", "cuda-graphs"))
            raise UsageError(f"{what}: the Ray cluster has no GPU")
        sampling = max(1, cpus - max(1, cpus // 4))
        if self.address == "local":
            return 1, {"num_cpus": sampling}, torch.get_num_threads()
        slot = min(CPU_SLOT, sampling)
        return max(1, sampling // slot), {"num_cpus": slot}, slot

    # -- the work
    def _units(self, pairs: list[tuple[Path, Path]], options: RestoreOptions, rows: int) -> list[_Unit]:
        """Files sized as a local folder run sizes them (read in parallel: on network storage that is
        latency), packed as it packs them, and the groups put in order into units of at least `rows`
        channel windows."""
        def look(pair):
            f = _File(os.path.abspath(pair[0]), os.path.abspath(pair[1]), options.seed, (str(pair[0]), str(pair[1])))
            try:
                samples, key, chars, f.levels = sizing(pair[0], options, self.sample_rate)
            except Exception:
                return f, None, None, 0  # the read reports why
            f.seconds = samples / self.sample_rate
            return f, samples, key, chars

        with ThreadPoolExecutor(16) as pool:
            found = list(pool.map(look, pairs))
        size = {id(f): self.geometry.count(samples) * key[0] if samples is not None else 1
                for f, samples, key, _ in found}
        units, unit = [], []
        # files share windows where the actors' engines can keep them apart (Engine.masks): not the apple plan's
        planned = (pack(found, self.geometry, self.files.model.text.max_tokens) if self.plan_name != "apple"
                   else ([(f, 0)] for f, *_ in found))
        for group in planned:
            unit.append(group)
            if sum(max(size[id(f)] for f, _ in g) for g in unit) >= rows:
                units.append(_Unit(unit))
                unit = []
        return units + ([_Unit(unit)] if unit else [])

    def restore_files(self, pairs: Iterable[tuple[str | Path, str | Path]], options: RestoreOptions | None = None,
                      *, overwrite: bool = False, progress=None, **_
                      ) -> Iterator[tuple[Path, Path, FileReport | RestoreError]]:
        """Restore the files on the cluster, yielding (input, output, report or error) as each one is
        written; existing outputs are kept unless `overwrite`. The sampler batch is the `batch` given,
        else each actor's own default (16 windows on a GPU, 1 on the CPU); a folder run's `batch_rows` is
        not used."""
        options = RestoreOptions.of(options)
        cfg, post = options.resolve(self.files.samplers, has_skip=self.files.model.precondition == "obs_skip")
        settings = {**cfg.to_dict(), **post.to_dict()}
        self.pending = [(Path(i), Path(o)) for i, o in pairs]
        _sweep(self.pending)  # temporary files a killed run left behind
        ray = self._connect()
        actors, held, threads = self._resources(ray)
        units = self._units(self.pending, options, self.batch or (16 if "num_gpus" in held else 1))
        stage = dict(options=options, model_rate=self.sample_rate, geometry=self.geometry, settings=settings,
                     max_tokens=self.files.model.text.max_tokens, overwrite=overwrite)
        sampler = dict(model=self.model, plan=self.plan_name, compile=self.compile, mlp_share=self.mlp_share,
                       device="cuda" if self.device.startswith("cuda") else self.device, batch=self.batch,
                       options=options, threads=threads)
        work = dict(units=units, stage=stage, sampler=sampler, actors=actors, held=held)
        meter = _Meter(getattr(progress, "enabled", False), len(self.pending),
                       sum(f.seconds for u in units for f in u.files))
        self.echo(f"cluster: {len(self.pending)} files in {len(units)} units on {actors} sampling "
                  f"actor(s) ({'a GPU' if 'num_gpus' in held else str(held['num_cpus']) + ' CPU(s)'} each)")
        try:
            for result in (_polled(ray, work) if ray.util.client.ray.is_connected() else _results(ray, **work)):
                r = json.loads(result)
                src, dst = r.pop("given")
                if "failed" in r:
                    meter.done(0.0)
                    kind = getattr(errors, r["type"], InputError)
                    kind = kind if isinstance(kind, type) and issubclass(kind, RestoreError) else InputError
                    yield Path(src), Path(dst), kind(r["failed"].replace(r["input"], src).replace(r["output"], dst))
                    continue
                rep = ClusterReport(**{**r, "input": src, "output": dst})
                meter.done(rep.seconds_audio)
                yield Path(src), Path(dst), rep
        except (RestoreError, KeyboardInterrupt, GeneratorExit):
            raise
        except Exception as e:  # Ray gave up (a worker died more than RETRIES times...): stop, keep what is done
            raise InputError(f"the cluster run stopped ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                             f"finished outputs are kept, run the same command again to resume") from e
        finally:
            meter.end()

    def close(self) -> None:
        """Leave the cluster (a local runtime stops) and remove what its workers had not finished writing."""
        try:
            if self.started_ray:
                self.started_ray = False
                _ray().shutdown()
        finally:
            _sweep(self.pending)

    def __enter__(self) -> "ClusterRestorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _results(ray, **work) -> Iterator[str]:
    """The pipeline, run from a process that is part of the cluster; yields each file's result (JSON)
    as it is written."""
    for row in _dataset(ray, **work).iter_rows():
        yield row["result"]


def _dataset(ray, *, units: list[_Unit], stage: dict, sampler: dict, actors: int, held: dict):
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.enable_fallback_to_arrow_object_ext_type = True  # a unit is a Python object (pickled)
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # Ray 2.60 takes its retry options only as the generic remote arguments it calls deprecated (the
        # extra pins that version); their different values also keep the read from being fused into the
        # sampling actors: reading runs on CPU tasks of its own.
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        ds = (ray.data.from_items([{"unit": u} for u in units], override_num_blocks=len(units))
              .map(_read, fn_kwargs=stage, num_cpus=1, max_retries=RETRIES)
              .map_batches(_Sampler, batch_size=1, batch_format="numpy",
                           compute=ray.data.ActorPoolStrategy(size=actors), fn_constructor_kwargs=sampler,
                           max_restarts=-1, max_task_retries=RETRIES, **held)
              .flat_map(_write, fn_kwargs=stage, num_cpus=1, max_retries=RETRIES))
    return ds


class _Coordinator:
    """Runs the pipeline inside the cluster for a process that joined it through Ray Client (ray://),
    where Ray Data cannot run its streaming executor; that process polls it for the results."""

    def __init__(self, work: dict):
        import ray

        self.results: list[str] = []
        self.error: str | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self._run, args=(ray, work), daemon=True, name="restore-cluster").start()

    def _run(self, ray, work: dict) -> None:
        try:
            for result in _results(ray, **work):
                with self.lock:
                    self.results.append(result)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.done.set()

    def poll(self, wait: float) -> tuple[list[str], bool, str | None]:
        """The results since the last poll (waiting up to `wait` s for one), whether the run is over, and
        why it stopped if it failed."""
        deadline = time.monotonic() + wait
        while not self.results and not self.done.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        with self.lock:
            out, self.results = self.results, []
        return out, self.done.is_set() and not self.results, self.error


def _polled(ray, work: dict) -> Iterator[str]:
    coordinator = ray.remote(num_cpus=0)(_Coordinator).remote(work)
    while True:
        results, over, error = ray.get(coordinator.poll.remote(1.0))
        yield from results
        if error is not None:
            raise RuntimeError(error)
        if over:
            return


@dataclass(frozen=True)
class _DriverPlan:
    """What a folder run asks of a restorer's plan: the driver itself samples nothing."""
    name: str = "cluster"
    device: str = "cluster"


def _sweep(pairs: list[tuple[Path, Path]]) -> None:
    """Remove the temporary files (.NAME.*.part: restore.audio.AtomicWriter and its float spool) of
    outputs that are not there: a worker killed mid-write leaves them, its retry writes anew."""
    for _, out in pairs:
        if out.parent.is_dir() and not out.exists():
            for p in glob.glob(os.path.join(glob.escape(str(out.parent)), f".{glob.escape(out.name)}.*.part")):
                Path(p).unlink(missing_ok=True)


class _Meter:
    """The cluster run's progress line: files, hours of audio, realtime factor."""

    def __init__(self, enabled: bool, files: int, seconds: float, clock=time.perf_counter):
        self.enabled, self.files, self.seconds, self.clock = enabled, files, seconds, clock
        self.count, self.audio, self.start = 0, 0.0, clock()

    def done(self, seconds: float) -> None:
        self.count += 1
        self.audio += seconds
        if self.enabled:
            wall = self.clock() - self.start
            sys.stderr.write(f"\r[{self.count}/{self.files} files] {self.audio / 3600:.2f}/{self.seconds / 3600:.2f} h "
                             f"of audio, {self.audio / max(wall, 1e-9):.1f}x realtime  ")
            sys.stderr.flush()

    def end(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 80 + "\r")
            sys.stderr.flush()
