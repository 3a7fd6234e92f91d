"""The Markdown report: headline table, paired comparison, per-degradation breakdown, sanity checks,
largest regressions, how to read it, and exactly what was measured."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .bootstrap import MIN_CLIPS_FOR_VERDICT, Estimate, verdict
from .columns import MetricSpec
from .scoring import column_values
from .summary import MetricSummary, Summary

LAG_WARN_MS = 2.0          # a delay above this distorts STOI and SI-SDR noticeably
LENGTH_WARN_MS = 50.0      # output and input should be the same length


def _ci(spec: MetricSpec, est: Estimate, signed: bool = False) -> str:
    if est.n == 0:
        return "—"
    if est.n < 2:
        return spec.fmt(est.mean, signed)
    return f"{spec.fmt(est.mean, signed)} [{spec.fmt(est.low, signed)}, {spec.fmt(est.high, signed)}]"


def _header(ms: MetricSummary) -> str:
    unit = f" ({ms.spec.unit})" if ms.spec.unit else ""
    return f"{ms.spec.label}{unit} {ms.spec.arrow}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def headline_table(summary: Summary) -> list[str]:
    """Systems x metrics, each cell 'mean [95% CI]', with the clip count per metric."""
    header = ["system"] + [_header(ms) for ms in summary.metrics]
    rows = [[f"**{s}**" if s == summary.baseline else s] + [_ci(ms.spec, ms.absolute[s]) for ms in summary.metrics]
            for s in summary.systems]
    rows.append(["*clips scored*"] + [f"*{max(ms.absolute[s].n for s in summary.systems)}*" for ms in summary.metrics])
    return _table(header, rows)


def delta_table(summary: Summary) -> list[str]:
    """Non-baseline systems x metrics, each cell 'Δ [95% CI] verdict'."""
    header = ["system"] + [_header(ms) for ms in summary.metrics]
    rows = []
    for s in summary.systems:
        if s == summary.baseline:
            continue
        cells = []
        for ms in summary.metrics:
            d = ms.delta[s]
            if d.n == 0:
                cells.append("—")
                continue
            word = ms.verdict(s)
            mark = {"better": " **better**", "worse": " **worse**", "too few clips": " (too few clips)"}.get(word, " ~")
            cells.append(_ci(ms.spec, d, signed=True) + mark)
        rows.append([s] + cells)
    return _table(header, rows)


def group_tables(summary: Summary) -> list[str]:
    """Per metric: degradation types x systems of means; ▲/▼ where the paired interval against the
    baseline says better/worse within that type."""
    lines: list[str] = []
    for ms in summary.metrics:
        if not any(ms.by_group[g][s].n for g in summary.groups for s in summary.systems):
            continue
        lines += ["", f"**{_header(ms)}**", ""]
        rows = []
        for g in summary.groups:
            # clips of this type that have this metric (WER vs human: only those with a transcript)
            n = max(ms.by_group[g][s].n for s in summary.systems)
            if n == 0:
                continue
            cells = []
            for s in summary.systems:
                est = ms.by_group[g][s]
                cell = ms.spec.fmt(est.mean) if est.n else "—"
                if s != summary.baseline:
                    word = verdict(ms.delta_by_group[g][s], ms.spec.higher_is_better)
                    cell += {"better": " ▲", "worse": " ▼"}.get(word, "")
                cells.append(cell)
            rows.append([f"{g} ({n})"] + cells)
        lines += _table([summary.group_column or "group"] + summary.systems, rows)
    return lines


def checks_section(summary: Summary, errors: list[str], warnings: list[str], rows: list[dict]) -> list[str]:
    lines = ["## Sanity checks", ""]
    problems = []
    table = []
    for s in summary.systems:
        c = summary.checks[s]
        lag, diff = c["median_lag_ms"], c["max_abs_length_diff_ms"]
        table.append([s, "—" if math.isnan(lag) else f"{lag:+.1f}", "—" if math.isnan(diff) else f"{diff:.0f}"])
        if not math.isnan(lag) and abs(lag) > LAG_WARN_MS:
            problems.append(f"- **{s}** is delayed by {lag:+.1f} ms against the clean reference (median over "
                            "clips): STOI and SI-SDR compare samples in place and punish it for that; fix "
                            "the delay before trusting those two numbers.")
        if not math.isnan(diff) and diff > LENGTH_WARN_MS:
            problems.append(f"- **{s}** changes clip length by up to {diff:.0f} ms; reference metrics cut both "
                            "signals to the shorter one.")
    lines += _table(["system", "median lag vs clean (ms)", "max length change (ms)"], table)
    if any("wer_asr" in r for r in rows) and "clean" in summary.systems:
        clean_wer = column_values(rows, "clean", "wer_asr")
        clean_wer = clean_wer[np.isfinite(clean_wer)]
        if len(clean_wer):
            ok = float(np.max(clean_wer)) == 0.0
            lines += ["", f"- WER of the clean reference against its own ASR transcript: "
                          f"{'0 on every clip (the recogniser is deterministic)' if ok else 'NOT 0 — the ASR is not deterministic or the transcripts are stale; WER vs ASR of clean is unreliable'}."]
        jit = [(r["wer_jit"], r["ref_words_jit"]) for r in rows
               if r["system"] == "clean" and r.get("ref_words_jit", 0) > 0 and np.isfinite(r["wer_jit"])]
        if jit:
            floor = sum(wer * words for wer, words in jit) / sum(words for _, words in jit)
            lines.append(f"- Jitter-averaged WER of the clean reference against itself: {100 * floor:.1f}%, "
                         "the recogniser's own instability under a delay of half a frame: the "
                         "floor that any changed signal meets in that column.")
    lines += [""] + (problems or ["- No delay or length problems found."])
    for w in warnings:
        lines.append(f"- Warning: {w}")
    if errors:
        lines += ["", f"{len(errors)} metric computations failed (those cells are empty in the CSV):", ""]
        lines += [f"- `{e}`" for e in errors[:20]]
        if len(errors) > 20:
            lines.append(f"- ... and {len(errors) - 20} more")
    return lines


def regressions_section(summary: Summary, rows: list[dict], per_system: int = 5) -> list[str]:
    """The clips where each system loses most against the baseline, on the first of DNSMOS OVRL,
    PESQ, WER that was measured: where to listen first."""
    key = next((k for k in ("dnsmos_ovrl", "pesq", "wer_asr", "wer_human")
                if any(ms.spec.key == k for ms in summary.metrics)), None)
    if key is None:
        return []
    spec = next(ms.spec for ms in summary.metrics if ms.spec.key == key)
    base = {r["clip_id"]: r.get(key, math.nan) for r in rows if r["system"] == summary.baseline}
    lines = ["## Largest regressions", "",
             f"Clips where each system loses most {spec.label} against '{summary.baseline}' (listen to these first):", ""]
    body = []
    for s in summary.systems:
        if s in (summary.baseline, "clean"):
            continue
        diffs = []
        for r in rows:
            if r["system"] != s:
                continue
            d = float(r.get(key, math.nan)) - float(base[r["clip_id"]])
            if math.isfinite(d):
                worse = -d if spec.higher_is_better else d
                diffs.append((worse, r["clip_id"], d, r.get(summary.group_column or "", "")))
        for worse, clip_id, d, group in sorted(diffs, reverse=True)[:per_system]:
            if worse > 0:
                body.append([s, clip_id, str(group), spec.fmt(d, signed=True)])
    if not body:
        return lines + ["No clip got worse."]
    return lines + _table(["system", "clip", summary.group_column or "group", f"Δ {spec.label}"], body)


HOW_TO_READ = """## How to read this report

- **Headline table**: the mean of each metric per system over all clips, with a 95% bootstrap
  interval over clips in brackets. ↑ means higher is better, ↓ lower is better. The bold row is the
  baseline. `—` means not applicable: reference metrics are not computed for the clean reference
  itself, and speaker similarity is not computed for the file it is compared with.
- **Against the baseline**: the mean of per-clip differences (system − baseline) with a paired
  95% bootstrap interval. Pairing removes the clip-to-clip variation both systems share, so a
  difference can be clear even when the headline intervals overlap. **better**/**worse**: the
  interval lies entirely on one side of zero; `~`: the data cannot tell the two apart. With many
  metrics and systems, expect about one in twenty intervals to miss by chance; look for a
  consistent picture, not one cell.
- **WER** is computed over all words of all clips (errors / reference words), not as a mean of
  per-clip rates. *vs human transcript* uses the corpus transcripts; *vs ASR of clean* uses the
  pocketsphinx transcript of the clean reference (most LibriSpeech clips have no transcript
  offline), so it measures how much the damage or the restoration changes what the recogniser
  hears, not absolute intelligibility — the clean row is 0 there by construction. That reading is
  unstable: delaying a clean clip by 5 ms, or adding white noise 40 dB below it, changes about a
  quarter of its words (72 dev clips), so a single reading charges any output that is not
  sample-identical to the reference for the recogniser's instability. *Jitter-averaged* reads
  every signal twice, as it is and delayed by 5 ms (half the recogniser's 10 ms frame step), and
  pairs the reference's reading at one delay with the output's at the other, both ways: every system,
  the clean reference included, meets the same instability. Pocketsphinx is a
  small, old recogniser: its absolute WER is high; compare systems, not with published numbers. If
  a restorer is given the transcript as guidance, its WER against that transcript is not an
  independent measurement.
- **Speaker similarity**: cosine between Resemblyzer embeddings of the output and the clean
  reference (or the degraded input when there is no reference); 1 = identical voice. For scale: on
  the dev set, two *different* clean utterances of one speaker score 0.79–0.94 (5th–95th
  percentile) and utterances of different speakers 0.44–0.66, so a drop of a few hundredths is a
  small change of voice character, and a value below about 0.7 no longer sounds like the speaker to
  the embedding.
- **DNSMOS P.835** predicts listener ratings (1–5) without a reference: SIG the speech itself, BAK
  the background (higher = quieter), OVRL the overall impression. It is a model, not listeners,
  and it rates the recording, not its faithfulness: the clean row is the practical ceiling for
  this material (audiobook recordings are not studio quality), and a system can exceed it on BAK
  by removing room tone the clean reference has.
- **PESQ (wideband, P.862.2)** 1.04–4.64, **STOI** 0–1 and **SI-SDR** (dB) compare with the clean
  reference sample by sample; they reward faithful reconstruction and punish anything that is not
  in the reference, including plausible generated detail. Generative restorers can score lower on
  them while sounding better; read them together with DNSMOS and WER.
- **Per degradation type**: the same means per type of damage (clip count in brackets); ▲/▼ mark
  a paired interval that excludes zero within that type. With 8 clips per type these intervals are
  wide: treat them as where to look, not as verdicts.
- **Sanity checks**: a system's delay or length change against the reference, which silently ruins
  STOI and SI-SDR, and the failures of individual metric computations.
"""


def write_report(path: str | Path, summary: Summary, rows: list[dict], *, plots: dict[str, str],
                 spectrograms: list[str], setup: list[str], errors: list[str], warnings: list[str]) -> Path:
    """Write report.md. `plots` maps a title to a path relative to the report; `setup` holds
    preformatted Markdown lines on versions, timings and the command."""
    lines = ["# Speech restoration evaluation", "",
             f"{summary.n_clips} clips, systems: {', '.join(summary.systems)}; baseline for paired "
             f"differences: **{summary.baseline}**. Intervals: 95% percentile bootstrap over clips, "
             f"{summary.n_resamples} resamples, seed {summary.seed}.", "",
             "## Headline", ""]
    lines += headline_table(summary)
    if len(summary.systems) > 1:
        lines += ["", f"## Against '{summary.baseline}' (paired per clip)", ""]
        lines += delta_table(summary)
    for title, rel in plots.items():
        lines += ["", f"![{title}]({rel})"]
    if summary.groups:
        lines += ["", f"## Per {summary.group_column}", "",
                  f"Means per {summary.group_column} (clips in brackets); ▲/▼: paired interval against "
                  f"'{summary.baseline}' says better/worse within that type (shown from "
                  f"{MIN_CLIPS_FOR_VERDICT} clips up)."]
        lines += group_tables(summary)
    lines += [""] + checks_section(summary, errors, warnings, rows)
    reg = regressions_section(summary, rows)
    if reg:
        lines += [""] + reg
    if spectrograms:
        lines += ["", "## Spectrograms", "", "Same colour scale in every row of a panel (dB, 80 dB range)."]
        for rel in spectrograms:
            lines += ["", f"![{Path(rel).stem}]({rel})"]
    lines += ["", HOW_TO_READ, "## Setup", ""] + setup
    path = Path(path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
