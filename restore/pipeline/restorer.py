"""Restoring files: windows through an engine's sampler loop, codec work overlapped with sampling,
short files packed into shared windows, windows of several files batched into one loop when asked
(`batch_rows`), short files read ahead on a pool where the plan has cores to spare, and the files'
writing on a thread of its own beside the engine."""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from queue import Empty, Queue
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from .. import bandwidth, weights
from ..audio import as_path
from ..codec import build_codec
from ..config import PostConfig, SamplerConfig, WindowConfig
from ..engines.factory import build_engine
from ..engines.plan import Plan, resolve_plan
from ..engines.trace import Tracer
from ..errors import RestoreError, UsageError
from ..model.encoder import reach as encoder_reach
from ..options import RestoreOptions, at_least
from ..sampling import source_for
from . import post as post_mod
from .job import FileJob, FileReport, Window, group_windows, sizing
from .loop import generate_latents, noise_draws
from .noise import WindowNoise
from .windows import Geometry, extents, grid_offsets, pack, spin, unspin


@dataclass
class Progress:
    """What a progress display needs; passed to the callback after every sampler step."""
    file: str
    window: int
    windows: int
    step: int
    steps: int


def choose_plan(plan: str = "auto", device: str = "auto", mlp_share: float | None = None, compile: str = "off",
                cuda: bool | None = None) -> Plan:
    """The plan for a request, or a UsageError saying why it cannot run (before anything loads); `cuda`:
    whether the machine that runs it has a CUDA GPU (None: this one)."""
    try:
        return resolve_plan(plan, device, mlp_share, compile=compile, cuda=cuda)
    except ValueError as e:
        raise UsageError(str(e)) from None


class Restorer:
    """Loads a model once and restores files with it.

    >>> r = Restorer()                       # the shipped default model, best plan for this machine
    >>> r.restore_file("in.wav", "out.wav", sampler="flash")
    >>> r.restore_file("in.wav", "out.wav", RestoreOptions(sampler="flash", seed=1))
    """

    def __init__(self, model: str | Path | None = None, *, plan: str | Plan = "auto", device: str = "auto",
                 window: WindowConfig | None = None, mlp_share: float | None = None, trace: bool = False,
                 compile: str = "off", status: Callable[[str], None] | None = None):
        """`status` is told what the long phases before the first step are (loading the model, measuring
        the MLP split, compiling, starting a worker) as each begins."""
        self.plan = plan if isinstance(plan, Plan) else choose_plan(plan, device, mlp_share, compile)
        self.tracer = Tracer(enabled=trace, status=status)
        self.model_dir = weights.find_model(None if model is None else as_path(model, "model"))
        with self.tracer.phase(f"loading the model ({self.plan.name} plan)"):
            self._load(window)
        self.noise_pool = (ThreadPoolExecutor(self.plan.noise_threads, thread_name_prefix="restore-noise")
                           if self.plan.noise_threads > 0 else None)

    def _load(self, window: WindowConfig | None) -> None:
        self.files = weights.load(self.model_dir)
        if self.plan.engine == "mlx":  # MLX loads its own weights: a torch copy would double the memory
            from ..model.dit import DiT
            with torch.device("meta"):
                self.model = DiT(self.files.model, self.files.codec)  # configuration only, no storage
        else:
            self.model = weights.build_model(self.files, device=self.plan.device)
        self.skip = weights.build_skip(self.files, self.plan.device)
        self.codec = build_codec(self.files.codec).to(self.plan.device)
        self.sample_rate = self.files.codec.sample_rate
        wc = window or WindowConfig()
        self.geometry = Geometry.of(wc, self.sample_rate, self.codec.hop)
        # frames either side of a file's own whose conditions its samples reach (the codec's frames
        # straddle two hops): where files share a window, they are the file's (windows.frame_groups)
        self.reach = encoder_reach(self.files.model.encoder) + 1
        self.engine = build_engine(self.plan, self.model, self.codec, model_dir=self.model_dir,
                                   frames=self.codec.frames(self.geometry.length), samples=self.geometry.length,
                                   tracer=self.tracer)

    def close(self) -> None:
        """Stop the engine's worker process, if the plan has one, and the noise threads."""
        self.engine.close()
        if self.noise_pool is not None:
            self.noise_pool.shutdown(wait=True)

    def __enter__(self) -> "Restorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def restore_file(self, input: str | Path, output: str | Path, options: RestoreOptions | None = None, *,
                     overwrite: bool = False, progress: Callable[[Progress], None] | None = None,
                     **changes) -> FileReport:
        """Restore `input` into `output` (format from its extension, at the input's rate unless the
        options' `sample_rate` is given); the output appears only when complete, and an existing one is
        kept unless `overwrite`. Options: a RestoreOptions, and/or its fields as keyword arguments
        (sampler, steps, guidance, strength, keep_input, seed, transcript, channels, sample_rate, level,
        extend_band).
        Raises a RestoreError (one sentence) for anything that cannot be done."""
        options = RestoreOptions.of(options, **changes)
        for _, _, result in self.restore_files([(input, output)], options, overwrite=overwrite, progress=progress):
            if isinstance(result, RestoreError):
                raise result
            return result
        raise AssertionError("unreachable: one file in, one result out")

    def restore_files(self, pairs: Iterable[tuple[str | Path, str | Path]], options: RestoreOptions | None = None,
                      *, overwrite: bool = False, batch_rows: int = 1,
                      progress: Callable[[Progress], None] | None = None, **changes
                      ) -> Iterator[tuple[Path, Path, FileReport | RestoreError]]:
        """Restore many files, yielding (input, output, report or error) as each one finishes. Files no
        longer than a window are packed end to end into shared windows, a short silence apart, and cut
        back out (`windows.pack`); each keeps its own level, noise and post-processing, and the model
        hears it apart from the others (not on the apple plan, whose engines cannot keep them apart:
        there each file has its windows to itself). Windows of consecutive groups share a sampler loop
        up to `batch_rows` rows (a GPU restores a folder far faster so); each keeps its own seeds, so
        batching does not change the audio. A file that cannot be opened, or fails, is reported and the
        others go on. Existing outputs are kept unless `overwrite`. Files are written on a thread of
        their own while the engine goes on with the next batch (`_Writer`); results come in order, in
        the caller's thread. Stopping early (an error, Ctrl-C, closing the iterator) leaves no temporary
        file: the files whose audio was all restored are still written (and, on an error or Ctrl-C,
        yielded before it is raised), but none after a failed file that was the last result taken; the
        others are dropped."""
        options = RestoreOptions.of(options, **changes)
        at_least("batch_rows", batch_rows, 1)
        cfg, post = options.resolve(self.files.samplers, has_skip=self.skip is not None)
        max_tokens = self.model.config.text.max_tokens
        settings = {**cfg.to_dict(), **post.to_dict()}
        failed: list[tuple[Path, Path, RestoreError]] = []
        open_jobs: set[FileJob] = set()  # jobs with a temporary output file: removed if we stop early

        def sized() -> Iterator[tuple]:
            for src, dst in pairs:
                try:
                    samples, key, chars, levels = sizing(src, options, self.sample_rate)
                except Exception:  # opening it says why, below
                    samples, key, chars, levels = None, None, 0, None
                yield (src, dst, levels, samples), samples, key, chars

        # files share windows only where the engine can keep them apart (Engine.masks)
        planned = (pack(sized(), self.geometry, max_tokens) if self.engine.masks
                   else ([(item, 0)] for item, *_ in sized()))

        def open_group(group) -> tuple[list[Window], list[tuple]]:
            """A planned group's files opened (each a job with a temporary output, or a failure) and
            its windows read: those of a file longer than a window as the engine comes to them."""
            jobs, failures = [], []
            for (src, dst, levels, _), offset in group:
                try:
                    job = FileJob(src, dst, options, model_rate=self.sample_rate, geometry=self.geometry,
                                  settings=settings, overwrite=overwrite, tracer=self.tracer,
                                  max_tokens=max_tokens, levels=levels)
                except RestoreError as e:
                    failures.append((_path(src), _path(dst), e))
                    job = None
                else:
                    open_jobs.add(job)
                jobs.append((job, offset))
            return group_windows(jobs), failures

        def long(group) -> bool:
            samples = group[0][0][3]
            return len(group) == 1 and samples is not None and samples > self.geometry.length

        windows = _read_ahead(planned, open_group, long, failed, self.plan.read_threads)
        batches = _prefetch(_batched(windows, batch_rows))
        try:
            yield from self._deliver(batches, cfg, post, progress, failed, open_jobs)
        finally:
            batches.close()  # stops the reading thread first: it opens jobs, with temporary files
            for job in list(open_jobs):  # an error or interruption: no half-written outputs stay behind
                job.abort()

    def _deliver(self, batches, cfg: SamplerConfig, post: PostConfig, progress, failed, open_jobs):
        """Hand each restored batch to the writer thread, which cuts its windows into their files' parts
        and routes them (`_Writer`), while this thread goes on with the next batch; yield files as they
        finish or fail, in the order the writer finishes them. The engine's warnings since the last file
        finished go with the next file to finish, as counted when its batch was handed over."""
        unsaid: list[str] = []  # the writer's: engine warnings in no report yet

        def finish(item):
            warnings, errors, batch, outs = item
            unsaid.extend(warnings)
            yield from errors
            for w, out in zip(batch, outs):
                for part in w.parts:
                    job = part.job
                    if job.failed is not None:
                        if job in open_jobs:
                            job.abort()
                            open_jobs.discard(job)
                            yield job.input, job.output, job.failed
                        continue
                    try:
                        if job.deliver(part.cut(out)):
                            report = job.finish(unsaid[:])
                            open_jobs.discard(job)  # (after: an unexpected error in finish leaves it to abort)
                            unsaid.clear()
                            yield job.input, job.output, report
                    except RestoreError as e:
                        job.failed = e
                        job.abort()
                        open_jobs.discard(job)
                        yield job.input, job.output, e

        writer = _Writer(finish)
        warned = len(self.engine.warnings)
        try:
            try:
                # files that failed to open go out ahead of the batch they were read with, the rest at the end
                for batch, outs in chain(self._pipeline(batches, cfg, post, progress), [([], [])]):
                    warnings = self.engine.warnings[warned:]
                    warned += len(warnings)
                    errors = [failed.pop(0) for _ in range(len(failed))]
                    yield from writer.hand((warnings, errors, batch, outs))
            except GeneratorExit:  # the caller stopped: it takes no more
                raise
            except BaseException:  # an error or Ctrl-C: the files restored before it are written and said first
                yield from writer.drain()
                raise
            yield from writer.drain()
        finally:
            writer.stop()

    def _pipeline(self, batches: Iterator[list[Window]], cfg: SamplerConfig, post: PostConfig, progress
                  ) -> Iterator[tuple[list[Window], list[np.ndarray]]]:
        """Batches through the engine, codec work overlapped with sampling: batch k+1's encode is queued
        before batch k samples, and batch k's decode after it; plans with a worker run both in the idle
        time they declare. The first encode has nothing to overlap and starts at once. Yields each batch
        with its restored windows (rows, L) at the model rate."""
        eng = self.engine
        live = lambda b: [w for w in b if w.wave is not None]
        offsets = grid_offsets(cfg.shifts, self.codec.hop)
        waves = lambda b: spin(torch.cat([w.wave for w in live(b)]), offsets)  # noqa: E731
        nxt = next(batches, None)
        enc = eng.encode_async(waves(nxt), urgent=True) if nxt and live(nxt) else None
        pending = None
        k = 0
        while nxt is not None:
            cur, obs = nxt, (eng.result(enc) if enc is not None else None)
            nxt = next(batches, None)
            enc = eng.encode_async(waves(nxt)) if nxt and live(nxt) else None
            latents = None
            if obs is not None:
                with self.tracer.span(f"batch {k + 1}", "pipeline"):
                    latents = self._sample(live(cur), obs, cfg, post, progress)
                eng.idle()  # between batches the worker's engine has no branch to run
            if pending is not None:
                yield self._split(*pending, offsets)
            pending = (eng.decode_async(latents) if latents is not None else None, cur)
            k += 1
        if pending is not None:
            yield self._split(*pending, offsets)

    @torch.inference_mode()
    def _sample(self, batch: list[Window], obs: torch.Tensor, cfg: SamplerConfig, post: PostConfig, progress
                ) -> torch.Tensor:
        """One sampler loop over a batch of windows, then the post-processing -> latents (R, T, D), R the
        windows' rows once per grid offset (`SamplerConfig.shifts`, windows.spin: `obs` holds them so).
        Each file's frames draw their noise from its own generator, seeded by (seed, window index), the
        same at every offset, and are post-processed on their own: the audio does not depend on batching."""
        offsets = grid_offsets(cfg.shifts, self.codec.hop)
        wave = spin(torch.cat([w.wave for w in batch]), offsets)
        frames, hop = obs.shape[1], self.codec.hop
        # files sharing a window: the model hears each apart from the others, each is post-processed
        # on its own frames (windows.frame_groups, extents), found where the offset puts them
        groups = [g for s in offsets for w in batch for g in [w.groups(frames, hop, self.reach, s)] * w.wave.shape[0]]
        shared = any(len(w.parts) > 1 for w in batch)
        schedule = cfg.schedule()
        self.engine.begin_window(wave, obs, [t for _ in offsets for w in batch for t in w.texts],
                                 torch.from_numpy(np.stack(groups)) if shared else None, any(schedule.guided))
        drawn = WindowNoise([w.noise(frames, hop) for w in batch], [w.wave.shape[0] for w in batch],
                            obs.shape[1:], noise_draws(cfg), self.plan.device, self.noise_pool)
        noise = drawn if len(offsets) == 1 else (lambda: drawn().repeat(len(offsets), 1, 1))
        spans = [extents(g) for g in groups]
        # each file's cut-off, where its input is band-limited below the model's band (restore.bandwidth)
        cutoffs = [[bandwidth.limit(p.job.levels.cutoff_hz, self.sample_rate) for p in w.parts]
                   for _ in offsets for w in batch for _ in range(w.wave.shape[0])]
        first = batch[0].parts[0]
        model = self.files.model
        source = source_for(model.source, model.source_sigma, obs.to(self.plan.device))
        start = source.sample(noise().float().to(self.plan.device))
        skip = self.skip.bind(obs) if self.skip is not None else None
        lin = post_mod.linear_estimate(skip, start, cfg) if post.strength != 1.0 else None
        latents, evaluations = None, schedule.evaluations
        kept: list[torch.Tensor] = []  # the first step's estimate, where it is mixed into the output
        keep = kept.append if cfg.mix_first > 0 and evaluations > 1 and schedule.times[0] >= 1.0 else None
        for i, latents in generate_latents(self.engine, start, cfg, noise, self.plan.device, skip, source, keep):
            if progress:
                progress(Progress(str(first.job.input), first.index, first.job.count, i, evaluations))
        out = post_mod.finish(self.codec, post, obs, latents, lin, spans, cutoffs)
        if kept:
            one = post_mod.finish(self.codec, post, obs, kept[0], lin, spans, cutoffs)
            out = post_mod.mix(self.codec, one, out, cfg.mix_first, spans)
        return out

    def _split(self, handle, batch: list[Window], offsets: list[int]) -> tuple[list[Window], list[np.ndarray]]:
        """A batch's restored audio, the copies at each grid offset averaged (windows.unspin), cut into
        its windows (rows, L)."""
        audio = unspin(self.engine.result(handle).float().cpu().numpy(), offsets) if handle is not None else None
        outs, row = [], 0
        for w in batch:
            if w.wave is None:
                outs.append(None)
                continue
            outs.append(audio[row : row + w.wave.shape[0]])
            row += w.wave.shape[0]
        return batch, outs


def _path(value):
    """A Path where `value` names one (errors about arguments that do not are yielded as given)."""
    return Path(value) if isinstance(value, (str, os.PathLike)) else value


def _read_ahead(planned: Iterable[list], open_group: Callable, long: Callable[[list], bool], failed: list,
                threads: int) -> Iterator[Window]:
    """The windows of the planned groups, in order. `open_group(group)` opens a group's files -> (its
    windows, the failures); the failures go into `failed` as its windows come due, so they are said with
    the batch they belong to whatever is read ahead. With `threads` > 1, groups that fill at most one
    window are opened and read on a pool of that many threads, up to 2 * threads groups ahead (a GPU
    restores a window of short files in less time than one thread takes to open them); a `long` file's
    windows are read in order as they come due, never held whole. Closing this generator cancels what
    has not started and waits for what has, so every job opened is in the caller's hands."""
    def due(opened) -> Iterator[Window]:
        windows, failures = opened
        failed.extend(failures)
        yield from windows

    if threads <= 1:
        for group in planned:
            yield from due(open_group(group))
        return

    def read(group) -> tuple[list[Window], list[tuple]]:
        windows, failures = open_group(group)
        return list(windows), failures

    pool = ThreadPoolExecutor(threads, thread_name_prefix="restore-read")
    ahead: deque = deque()  # futures of short groups, or long groups to open when due

    def oldest() -> Iterator[Window]:
        item = ahead.popleft()
        return due(item.result() if isinstance(item, Future) else open_group(item))

    try:
        for group in planned:
            ahead.append(group if long(group) else pool.submit(read, group))
            while len(ahead) > 2 * threads:
                yield from oldest()
        while ahead:
            yield from oldest()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _batched(windows: Iterator[Window], rows: int) -> Iterator[list[Window]]:
    batch: list[Window] = []
    try:
        for w in windows:
            batch.append(w)
            if sum(x.wave.shape[0] for x in batch if x.wave is not None) >= rows:
                yield batch
                batch = []
        if batch:
            yield batch
    finally:
        if hasattr(windows, "close"):
            windows.close()  # a reader's pool stops here (_read_ahead)


def _prefetch(batches: Iterator[list[Window]], depth: int = 2) -> Iterator[list[Window]]:
    """Read and resample the next batches in a background thread while the engine samples (soundfile
    and soxr release the GIL), so I/O overlaps sampling. Closing this generator stops the thread and
    waits for it, so nothing it opened is left unseen."""
    q: Queue = Queue(maxsize=depth)
    end = object()
    stop = threading.Event()

    def produce():
        try:
            for b in batches:
                if stop.is_set():
                    return
                q.put(b)
            q.put(end)
        except BaseException as e:  # surface reading errors in the consumer
            q.put(e)
        finally:
            if hasattr(batches, "close"):
                batches.close()  # in this thread: whatever reads ahead has stopped before the thread ends

    thread = threading.Thread(target=produce, daemon=True, name="restore-read")
    thread.start()
    try:
        while True:
            item = q.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # make room for a batch it is putting, so that it sees `stop`
            try:
                q.get(timeout=0.05)
            except Empty:
                pass


class _Writer:
    """The files' finishing work on a thread of its own ("restore-write"): cutting restored windows into
    their files, stitching, resampling to each file's rate, levelling and the atomic writes, so that the
    engine is not idle meanwhile. `finish(item)` does one handed-over item's work and yields its results;
    the writer runs the items in order and the caller's thread takes the results in that order (`hand`,
    `drain`): the same results in the same order as finishing each item in the caller's thread where it
    is handed over. At most `depth` items wait or run at a time (the caller waits, taking results).

    The caller may stop at any result (a full disk stops a folder run), so the writer goes past a failed
    file only once the caller has taken it and asked for more: stopping there leaves the files after it
    unwritten. Otherwise stopping (`stop`: closing the iterator, an error, Ctrl-C) lets the writer finish
    the files it was handed, whose audio is complete, and waits for the thread. An exception raised in
    `finish` stops the writer and is raised in the caller's thread where its result would have come."""

    def __init__(self, finish: Callable[[Any], Iterator[tuple]], depth: int = 2):
        self.finish, self.depth = finish, depth
        self.todo: Queue = Queue()
        self.done: Queue = Queue()  # results, each item's followed by _ITEM_DONE, or an exception
        self.handed = 0  # items handed over whose results the caller has not all taken
        self.taken = 0  # results the caller took and went on from
        self.stopping = False
        self.turn = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True, name="restore-write")
        self.thread.start()

    def _run(self) -> None:
        made = 0
        try:
            while (item := self.todo.get()) is not _STOP:
                for result in self.finish(item):
                    self.done.put(result)
                    made += 1
                    if isinstance(result[2], Exception):
                        with self.turn:
                            self.turn.wait_for(lambda: self.taken >= made or self.stopping)
                            if self.taken < made:
                                return
                self.done.put(_ITEM_DONE)
        except BaseException as e:  # raised in the caller's thread, in its place
            self.done.put(e)

    def hand(self, item) -> Iterator[tuple]:
        """Hand over an item, once fewer than `depth` are unfinished; yield the results ready by then."""
        while self.handed >= self.depth:
            yield from self._take(wait=True)
        self.todo.put(item)
        self.handed += 1
        yield from self._take(wait=False)

    def drain(self) -> Iterator[tuple]:
        """Yield the results of everything handed over."""
        while self.handed:
            yield from self._take(wait=True)

    def _take(self, wait: bool) -> Iterator[tuple]:
        """Yield results in order: those ready now, or (wait) up to the end of the oldest item."""
        while self.handed:
            try:
                result = self.done.get(block=wait)
            except Empty:
                return
            if result is _ITEM_DONE:
                self.handed -= 1
                if wait:
                    return
                continue
            if isinstance(result, BaseException):
                self.handed = 0  # the writer has stopped
                raise result
            yield result
            with self.turn:  # the caller asks for more
                self.taken += 1
                self.turn.notify()

    def stop(self) -> None:
        """Finish what was handed over, up to a failure not taken, and wait for the thread."""
        with self.turn:
            self.stopping = True
            self.turn.notify()
        self.todo.put(_STOP)
        self.thread.join()


_ITEM_DONE, _STOP = object(), object()
