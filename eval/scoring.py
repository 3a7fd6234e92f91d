"""Scoring every system file: look results up in the cache, compute what is missing (in parallel
worker processes), and assemble one row per (clip, system) with every metric."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import soundfile as sf

from .analyses import ANALYSES, run_analysis, version_of
from .audio import audio_hash, load_audio
from .cache import MetricCache
from .columns import GROUPS, REFERENCE_GROUPS
from .inputs import EvalSet
from .speaker import cosine
from .wer import jittered_word_errors, word_errors


@dataclass
class ScoreStats:
    computed: int = 0                 # analyses computed in this run
    cached: int = 0                   # analyses served from the cache
    wall_s: float = 0.0
    cpu_s_by_analysis: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Job:
    analysis: str
    path: Path
    ref_path: Path | None
    digest: str
    ref_digest: str | None


_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """A worker whose parent was killed would go on scoring the files already queued to it: stop it."""
    while os.getppid() == parent:
        time.sleep(2.0)
    os._exit(1)


def _compute(path: str, ref_path: str | None, names: list[str]) -> dict[str, tuple[str, object, float]]:
    """Run the named analyses on one file: {name: ('ok'|'error', value or message, seconds)}."""
    out: dict[str, tuple[str, object, float]] = {}
    est = load_audio(path)
    ref = load_audio(ref_path) if ref_path is not None else None
    for name in names:
        t0 = time.perf_counter()
        try:
            value = run_analysis(name, est, ref if ANALYSES[name].needs_reference else None)
            out[name] = ("ok", value, time.perf_counter() - t0)
        except Exception as e:  # a metric failing on one file must not stop the other 287
            out[name] = ("error", f"{type(e).__name__}: {e}", time.perf_counter() - t0)
    return out


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def score(evalset: EvalSet, groups: list[str], cache: MetricCache, jobs: int = 1,
          quiet: bool = False) -> tuple[list[dict], ScoreStats]:
    """Every metric of `groups` for every clip of every system.

    Returns one row per (clip, system) in clip order, then system order, and run statistics.
    Reference-based metrics need the clean reference; speaker similarity compares with the clean
    reference or, without one, the degraded input; WER needs a transcript, or a clean reference
    whose ASR transcript then serves as the reference (reference_kind asr_of_clean).
    """
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"unknown metric groups {sorted(unknown)}; known: {', '.join(GROUPS)}.")
    t_start = time.perf_counter()
    stats = ScoreStats()
    has_clean = evalset.has_clean
    ref_groups = [g for g in groups if g in REFERENCE_GROUPS] if has_clean else []
    if not has_clean and any(g in REFERENCE_GROUPS for g in groups):
        _log("[eval] no clean references: PESQ, STOI and SI-SDR are skipped", quiet)

    hashes: dict[Path, str] = {}

    def digest(p: Path) -> str:
        if p not in hashes:
            hashes[p] = audio_hash(p)
        return hashes[p]

    jobs_needed: list[_Job] = []

    def need(analysis: str, path: Path, ref: Path | None = None) -> None:
        jobs_needed.append(_Job(analysis, path, ref, digest(path), digest(ref) if ref else None))

    single = [a for g in groups if g in ("wer", "speaker", "dnsmos") for a in GROUPS[g]]
    paired = sorted({a for g in ref_groups for a in GROUPS[g]})
    for clip in evalset.clips:
        spk_ref = clip.clean or clip.degraded
        asr_reference = clip.clean is not None and clip.reference_kind in (None, "asr_of_clean")
        for files in evalset.systems.values():
            path = files[clip.clip_id]
            for a in single:
                if a != "asr_jitter" or asr_reference:  # jitter matters only against a reading
                    need(a, path)
            for a in paired:
                if digest(path) != digest(clip.clean):  # the reference scored against itself says nothing
                    need(a, path, clip.clean)
        if "speaker" in groups and spk_ref is not None:
            need("speaker_embedding", spk_ref)
        if "wer" in groups and asr_reference:
            if clip.transcript is None:
                need("asr", clip.clean)
            need("asr_jitter", clip.clean)

    # Look everything up; what is missing becomes one task per (file, reference) pair.
    results: dict[tuple[str, str, str | None], object] = {}
    tasks: dict[tuple[str, str | None], tuple[Path, Path | None, set[str]]] = {}
    seen: set[tuple[str, str, str | None]] = set()
    for job in jobs_needed:
        key = (job.analysis, job.digest, job.ref_digest)
        if key in seen:  # identical files (e.g. a system that copies its input) are scored once
            continue
        seen.add(key)
        value = cache.get(job.analysis, version_of(job.analysis), job.digest, job.ref_digest)
        if value is not None:
            results[key] = value
            stats.cached += 1
            continue
        tasks.setdefault((job.digest, job.ref_digest), (job.path, job.ref_path, set()))[2].add(job.analysis)

    n_tasks = len(tasks)
    _log(f"[eval] {len(evalset.clips)} clips x {len(evalset.systems)} systems: {stats.cached} results "
         f"cached, {sum(len(t[2]) for t in tasks.values())} to compute in {n_tasks} files", quiet)

    def store(task_key, outcome: dict) -> None:
        file_digest, ref_digest = task_key
        path = tasks[task_key][0]
        for name, (status, value, seconds) in outcome.items():
            stats.cpu_s_by_analysis[name] += seconds
            if status == "ok":
                results[(name, file_digest, ref_digest)] = value
                cache.put(name, version_of(name), file_digest, ref_digest, value)
                stats.computed += 1
            else:
                stats.errors.append(f"{name} on {path}: {value}")

    # Longest files first, so the last task to finish is a short one.
    order = sorted(tasks, key=lambda k: -tasks[k][0].stat().st_size)
    done, t0 = 0, time.perf_counter()

    def progress() -> None:
        if done == n_tasks or done % max(1, n_tasks // 20) == 0:
            rate = (time.perf_counter() - t0) / max(done, 1)
            _log(f"[eval] {done}/{n_tasks} files scored, about {rate * (n_tasks - done) / 60:.1f} min left", quiet)

    if jobs <= 1 or n_tasks <= 1:
        for k in order:
            path, ref, names = tasks[k]
            store(k, _compute(str(path), str(ref) if ref else None, sorted(names)))
            done += 1
            progress()
    elif n_tasks:
        # One thread per library per worker: the pool already uses every core, and oversubscribed
        # BLAS/OpenMP threads only slow each other down. The variables must be in the environment
        # the workers start with, because numpy sizes its thread pool when it is first imported.
        saved = {v: os.environ.get(v) for v in _THREAD_VARS}
        os.environ.update({v: "1" for v in _THREAD_VARS})
        try:
            with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                     initializer=_init_worker) as pool:
                futures = {pool.submit(_compute, str(tasks[k][0]), str(tasks[k][1]) if tasks[k][1] else None,
                                       sorted(tasks[k][2])): k for k in order}
                for fut in as_completed(futures):
                    store(futures[fut], fut.result())
                    done += 1
                    progress()
        finally:
            for v, old_value in saved.items():
                if old_value is None:
                    os.environ.pop(v, None)
                else:
                    os.environ[v] = old_value

    rows = _rows(evalset, groups, ref_groups, results, digest, stats)
    stats.wall_s = time.perf_counter() - t_start
    return rows, stats


def _duration(path: Path) -> float:
    info = sf.info(str(path))
    return info.frames / info.samplerate


def _rows(evalset: EvalSet, groups, ref_groups, results, digest, stats: ScoreStats) -> list[dict]:
    nan = float("nan")

    def get(analysis: str, path: Path, ref: Path | None = None):
        return results.get((analysis, digest(path), digest(ref) if ref else None))

    rows = []
    for clip in evalset.clips:
        # Resolve the reference transcript once per clip.
        transcript, kind = clip.transcript, clip.reference_kind
        if "wer" in groups and transcript is None and clip.clean is not None:
            transcript = get("asr", clip.clean)
            kind = "asr_of_clean" if transcript is not None else None
        spk_ref = clip.clean or clip.degraded
        ref_embedding = get("speaker_embedding", spk_ref) if ("speaker" in groups and spk_ref) else None
        ref_duration = _duration(clip.clean or clip.degraded) if (clip.clean or clip.degraded) else nan
        for system, files in evalset.systems.items():
            path = files[clip.clip_id]
            duration = _duration(path)
            row: dict = {"clip_id": clip.clip_id, "system": system, **clip.meta,
                         "duration_s": round(duration, 3),
                         "length_diff_ms": round((duration - ref_duration) * 1000, 1)}
            if "wer" in groups:
                hyp = get("asr", path)
                row.update(reference_kind=kind or "", reference_transcript=transcript or "",
                           hypothesis=hyp if hyp is not None else "")
                wer, words, errors = nan, 0, nan
                if hyp is not None and transcript:
                    we = word_errors(transcript, hyp)
                    wer, words, errors = we.wer, we.reference_words, we.errors
                row.update(wer=wer, word_errors=errors, ref_words=words)
                for suffix, k in (("human", "human"), ("asr", "asr_of_clean")):
                    row[f"wer_{suffix}"] = wer if kind == k else nan
                    row[f"ref_words_{suffix}"] = words if kind == k else 0
                row.update(wer_jit=nan, ref_words_jit=0)
                ref_more = get("asr_jitter", clip.clean) if kind == "asr_of_clean" else None
                hyp_more = get("asr_jitter", path) if ref_more is not None else None
                if hyp is not None and hyp_more is not None:
                    errors_mean, words_mean = jittered_word_errors([transcript, *ref_more], [hyp, *hyp_more])
                    row.update(wer_jit=errors_mean / words_mean if words_mean else nan, ref_words_jit=words_mean)
            if "speaker" in groups:
                emb = get("speaker_embedding", path)
                same = spk_ref is not None and digest(path) == digest(spk_ref)
                row["spk_sim"] = (cosine(emb, ref_embedding) if emb is not None and ref_embedding is not None
                                  and not same else nan)
                row["spk_reference"] = "clean" if clip.clean else "degraded"
            if "dnsmos" in groups:
                d = get("dnsmos", path) or {}
                for k in ("sig", "bak", "ovrl", "p808"):
                    row[f"dnsmos_{k}"] = d.get(k, nan)
            if ref_groups:
                for a in sorted({a for g in ref_groups for a in GROUPS[g]}):
                    v = get(a, path, clip.clean)
                    row["lag_ms" if a == "lag" else a] = float(v) if v is not None else nan
            rows.append(row)
    return rows


def column_values(rows: list[dict], system: str, key: str) -> np.ndarray:
    """One metric of one system in clip order (NaN where missing)."""
    return np.array([float(r.get(key, math.nan)) for r in rows if r["system"] == system], dtype=np.float64)
