"""python -m eval.run: score restored files against a test set and write the report.

Example:
  python -m eval.run --testset /tmp/devset /tmp/systems/noisereduce /tmp/systems/rnnoise \\
      --baseline degraded --out /tmp/eval_report
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from importlib import metadata
from pathlib import Path

from .analyses import ANALYSES, version_of
from .bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from .cache import MetricCache, default_cache_path
from .columns import GROUPS, missing_packages
from .inputs import discover
from .scoring import score
from .summary import Summary, summarise, write_rows_csv, write_summary_csv

SPECTROGRAM_KEYS = (("pesq", "PESQ", "{:.2f}"), ("dnsmos_ovrl", "OVRL", "{:.2f}"), ("wer", "WER", "{:.0%}"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("systems", nargs="*", metavar="[NAME=]DIR",
                   help="folders of output files, one per system, named like the clips")
    p.add_argument("--testset", help="folder with clean/, degraded/ and manifest.csv (eval.make_testset)")
    p.add_argument("--clean", help="folder of clean references (overrides the test set's)")
    p.add_argument("--degraded", help="folder of degraded inputs (overrides the test set's)")
    p.add_argument("--manifest", help="CSV with clip_id, transcript, reference_kind, degradation, ...")
    p.add_argument("--out", required=True, help="report folder (report.md, per_clip.csv, summary.csv, plots/)")
    p.add_argument("--baseline", help="system the others are compared with per clip (default: degraded)")
    p.add_argument("--metrics", default=",".join(GROUPS),
                   help=f"comma-separated groups to compute (default all: {','.join(GROUPS)})")
    p.add_argument("--group-by", default="degradation", help="manifest column to break results down by")
    p.add_argument("--no-clean-row", action="store_true", help="do not score the clean reference as a system")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    p.add_argument("--cache", default=str(default_cache_path()), help="metric cache file (SQLite)")
    p.add_argument("--no-cache", action="store_true", help="recompute everything and keep nothing")
    p.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed")
    p.add_argument("--spectrograms", type=int, default=9,
                   help="spectrogram panels to draw (one clip per degradation type)")
    p.add_argument("--quiet", action="store_true", help="no progress messages")
    return p


def _pick_spectrogram_clips(rows: list[dict], baseline: str, group_column: str | None, n: int) -> list[str]:
    """One clip per group (the first by id), then further clips in id order, up to n."""
    ids = [r["clip_id"] for r in rows if r["system"] == baseline]
    chosen: list[str] = []
    if group_column:
        seen = set()
        for r in rows:
            if r["system"] == baseline and r.get(group_column) not in seen:
                seen.add(r.get(group_column))
                chosen.append(r["clip_id"])
    for clip_id in ids:
        if clip_id not in chosen:
            chosen.append(clip_id)
    return chosen[:n]


def _caption(row: dict) -> str:
    parts = []
    for key, label, fmt in SPECTROGRAM_KEYS:
        v = row.get(key)
        if isinstance(v, float) and v == v:
            parts.append(f"{label} {fmt.format(v)}")
    return " · ".join(parts)


def _setup_lines(args, groups, stats, summary: Summary, timings: dict[str, float], cache_info: str) -> list[str]:
    analyses = sorted({a for g in groups for a in GROUPS[g]})
    lines = ["| analysis | version (part of the cache key) |", "|---|---|"]
    lines += [f"| {a} | `{version_of(a)}` |" for a in analyses if a in ANALYSES]
    cpu = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(stats.cpu_s_by_analysis.items(), key=lambda kv: -kv[1]))
    lines += ["",
              f"- DNSMOS model: {version_of('dnsmos').split('|')[1] if 'dnsmos' in analyses else 'not run'} "
              "(non-personalised, Microsoft DNS Challenge P.835 model as shipped in speechmos).",
              "- WER: pocketsphinx US English model shipped in the pocketsphinx wheel; jiwer alignment after "
              "text normalisation (lower case, accents folded, digits spelled out, punctuation removed).",
              "- All audio decoded to mono and resampled to 16 kHz (soxr_hq) before scoring.",
              f"- Bootstrap: {summary.n_resamples} resamples, seed {summary.seed}, percentile intervals.",
              f"- Run time: {timings['total']:.0f} s wall on {os.cpu_count()} CPU cores "
              f"({platform.processor() or platform.machine()}), {args.jobs} worker processes; scoring "
              f"{timings['score']:.0f} s, report and plots {timings['report']:.0f} s; 1-minute load average "
              f"{timings['load_start']:.1f} at the start and {timings['load_end']:.1f} at the end (above the "
              "worker count means other work competed for the cores and the time is inflated).",
              f"- Results computed in this run: {stats.computed}; served from the cache: {stats.cached} ({cache_info}).",
              f"- Time spent per analysis in this run (seconds, summed over worker processes): {cpu or 'none (all cached)'}.",
              f"- Python {platform.python_version()}; "
              + ", ".join(f"{p} {_version(p)}" for p in ("numpy", "torch", "librosa", "pesq", "pystoi", "jiwer",
                                                         "pocketsphinx", "resemblyzer", "speechmos", "onnxruntime")),
              f"- Command: `python -m eval.run {' '.join(shlex.quote(a) for a in sys.argv[1:])}`"]
    return lines


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    # intermixed: system folders may come before or after the options
    args = _parser().parse_intermixed_args(argv)
    t0 = time.perf_counter()
    load_start = os.getloadavg()[0]
    groups = [g.strip() for g in args.metrics.split(",") if g.strip()]
    try:
        unknown = set(groups) - set(GROUPS)
        if unknown or not groups:
            raise ValueError(f"unknown metric groups {sorted(unknown)}; choose from {', '.join(GROUPS)}.")
        for group, absent in missing_packages(groups).items():
            raise ValueError(f"metric group {group!r} needs {', '.join(absent)}: pip install "
                             f"{' '.join(absent)}, or leave the group out with --metrics.")
        evalset = discover(args.systems, testset=args.testset, clean=args.clean, degraded=args.degraded,
                           manifest=args.manifest, clean_row=not args.no_clean_row)
        systems = list(evalset.systems)
        baseline = args.baseline or ("degraded" if "degraded" in systems else systems[0])
        if baseline not in systems:
            raise ValueError(f"baseline {baseline!r} is not one of the systems ({', '.join(systems)}).")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for w in evalset.warnings:
        print(f"warning: {w}", file=sys.stderr)

    out = Path(args.out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    cache = MetricCache(None if args.no_cache else args.cache)
    rows, stats = score(evalset, groups, cache, jobs=args.jobs, quiet=args.quiet)
    cache_info = "cache disabled" if args.no_cache else f"{args.cache}, {len(cache)} entries"
    cache.close()
    t_scored = time.perf_counter()

    group_column = args.group_by if any(r.get(args.group_by) for r in rows) else None
    summary = summarise(rows, systems, baseline, group_column, args.resamples, args.seed)
    write_rows_csv(rows, out / "per_clip.csv")
    write_summary_csv(summary, out / "summary.csv")

    from . import plots as P  # deferred: matplotlib import is slow and unneeded on bad input
    from .report import write_report

    figures = {"Means with 95% intervals": P.metric_bars(summary, out / "plots" / "metrics.png")}
    if len(systems) > 1:
        figures[f"Paired differences to {baseline}"] = P.delta_bars(summary, out / "plots" / f"delta_vs_{baseline}.png")
    by_group = P.delta_by_group(summary, out / "plots" / f"delta_by_{group_column}.png",
                                ["dnsmos_ovrl", "pesq", "stoi", "wer_asr", "wer_jit", "spk_sim"]) if group_column else None
    if by_group is not None:
        figures[f"Differences per {group_column}"] = by_group
    spectrograms = []
    by_clip = {c.clip_id: c for c in evalset.clips}
    for clip_id in _pick_spectrogram_clips(rows, baseline, group_column, args.spectrograms):
        clip = by_clip[clip_id]
        files = {}
        if clip.clean is not None:
            files["clean"] = clip.clean
        files.update({s: f[clip_id] for s, f in evalset.systems.items() if s != "clean"})
        captions = {r["system"]: _caption(r) for r in rows if r["clip_id"] == clip_id}
        spectrograms.append(P.spectrogram_panel(clip_id, files, out / "plots" / "spectrograms" / f"{clip_id}.png",
                                                captions))
    t_report = time.perf_counter()
    timings = {"score": t_scored - t0, "report": t_report - t_scored, "total": t_report - t0,
               "load_start": load_start, "load_end": os.getloadavg()[0]}
    setup = _setup_lines(args, groups, stats, summary, timings, cache_info)
    write_report(out / "report.md", summary, rows,
                 plots={k: str(Path(v).relative_to(out)) for k, v in figures.items()},
                 spectrograms=[str(Path(p).relative_to(out)) for p in spectrograms],
                 setup=setup, errors=stats.errors, warnings=evalset.warnings)
    (out / "run.json").write_text(json.dumps({
        "argv": sys.argv[1:], "systems": systems, "baseline": baseline, "clips": len(evalset.clips),
        "timings_s": timings, "computed": stats.computed, "cached": stats.cached,
        "cpu_s_by_analysis": stats.cpu_s_by_analysis, "errors": stats.errors,
        "versions": {a: version_of(a) for g in groups for a in GROUPS[g]}}, indent=2))
    if not args.quiet:
        print(f"[eval] wrote {out / 'report.md'} in {timings['total']:.0f} s "
              f"({stats.computed} computed, {stats.cached} cached)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
