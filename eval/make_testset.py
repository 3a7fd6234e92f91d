"""python -m eval.make_testset: a deterministic degraded test set from clean speech, noise and room
impulse responses, using the project's degradation simulator (restore.training.degrade).

  python -m eval.make_testset --data /work/shared/data --out /tmp/devset
  python -m eval.make_testset --profile real --per-type 12 --data /work/shared/data --out /tmp/real0

Two profiles:
  mild   nine types, one effect each (plus 'mixed' combinations), at the simulator's training ranges:
         the regression check (inputs near PESQ 2.5).
  real   what people actually bring (inputs near PESQ 1.3): real noise at 0-15 dB SNR, noise +
         reverberation, reverberation alone, a 2-4 kHz band limit + noise, clipping + noise, and a
         real MP3 round trip at 16-32 kbit/s + noise, in equal shares. Decisions are taken on it.

Only the dev-eval speakers, dev noises and dev RIR of restore/training/split.json are used (never
training material). Writes <out>/clean/<id>.wav, <out>/degraded/<id>.wav (16 kHz PCM16),
<out>/manifest.csv (clip id, speaker, source file and span, degradation type, the effects applied
as JSON, reference transcript and whether it is human or the ASR of the clean clip) and
<out>/testset.json (settings and versions). The same inputs and seed give identical files.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from . import SAMPLE_RATE
from .audio import load_audio, write_audio

# The nine degradation types of the mild profile. 'mixed' cycles through realistic combinations.
TYPES = ("noise", "reverb", "bandlimit", "clip", "codec", "eq", "hum", "dropout", "mixed")
MIXED = (("reverb", "noise", "codec"), ("eq", "noise", "clip"), ("reverb", "noise", "bandlimit"),
         ("noise", "hum", "dropout"))


@dataclass(frozen=True)
class Kind:
    """One degradation type of the realistic profile: the simulator's effects (in its fixed order), the
    ranges they draw from, and optionally a real MP3 round trip after them."""
    name: str
    effects: tuple[str, ...]
    ranges: tuple[tuple[str, object], ...] = ()  # DegradeConfig fields for this type
    mp3_kbps: tuple[int, ...] = ()               # bit rates drawn from; empty: no MP3


_REAL_NOISE = (("p_synthetic_noise", 0.0),)      # recorded dev noises only
_ROOM = (("rt60", (0.3, 1.0)), ("drr_db", (-3.0, 9.0)))
REAL_KINDS = (
    Kind("noise", ("noise",), _REAL_NOISE + (("snr_db", (0.0, 15.0)),)),
    Kind("noise_reverb", ("reverb", "noise"), _REAL_NOISE + _ROOM + (("snr_db", (5.0, 20.0)),)),
    Kind("reverb", ("reverb",), _ROOM),
    Kind("bandlimit_noise", ("noise", "bandlimit"),
         _REAL_NOISE + (("snr_db", (5.0, 20.0)), ("bandwidth_hz", (2000.0, 4000.0)))),
    Kind("clip_noise", ("noise", "clip"), _REAL_NOISE + (("snr_db", (5.0, 20.0)), ("clip_fraction", (0.1, 0.4)))),
    Kind("mp3_noise", ("noise",), _REAL_NOISE + (("snr_db", (5.0, 20.0)),), mp3_kbps=(16, 24, 32)),
)
PROFILES = ("mild", "real")


def profile_types(profile: str) -> tuple[str, ...]:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose {' or '.join(PROFILES)}.")
    return TYPES if profile == "mild" else tuple(k.name for k in REAL_KINDS)


def mp3_roundtrip(x: np.ndarray, kbps: int) -> tuple[np.ndarray, dict]:
    """x (N,) at 16 kHz through a real MPEG-1/2 Layer III encoder and decoder (libsndfile's LAME and
    mpg123) at a constant bit rate; the codec's delay is found by cross-correlation and removed, so the
    result stays sample-aligned with the clean reference. Returns (y (N,), what was done)."""
    import io

    import soundfile as sf

    buf = io.BytesIO()
    # libsndfile maps compression_level 0..1 linearly onto MPEG-2's 160..8 kbit/s at this rate
    level = (160.0 - kbps) / 152.0
    sf.write(buf, x.astype(np.float32), SAMPLE_RATE, format="MP3", subtype="MPEG_LAYER_III",
             compression_level=level, bitrate_mode="CONSTANT")
    size = len(buf.getvalue())
    buf.seek(0)
    y, sr = sf.read(buf, dtype="float32")
    if sr != SAMPLE_RATE:
        raise ValueError(f"the MP3 decoder returned {sr} Hz, not {SAMPLE_RATE}.")
    max_lag = min(4096, len(y) - 1)
    corr = np.correlate(y[: len(x) + max_lag], x, mode="valid")[: max_lag + 1]
    lag = int(np.argmax(corr))
    y = y[lag : lag + len(x)]
    y = np.pad(y, (0, len(x) - len(y)))
    return y, {"kind": "mp3", "kbps": kbps, "measured_kbps": round(size * 8 / (len(x) / SAMPLE_RATE) / 1000, 1),
               "delay_samples": lag, "encoder": f"libsndfile {sf.__libsndfile_version__}"}
MIN_SECONDS, MAX_SECONDS = 3.0, 10.0
PEAK = 0.99           # degraded clips louder than this are scaled down instead of clipped on writing
TRIM_TOP_DB = 30.0    # leading/trailing silence quieter than peak - 30 dB is trimmed ...
TRIM_MARGIN_S = 0.25  # ... leaving this much of it
MANIFEST_COLUMNS = ("clip_id", "speaker", "source_file", "source_start_s", "source_end_s", "degradation",
                    "kinds", "params_json", "transcript", "reference_kind", "duration_s", "seed", "license")


@dataclass
class Segment:
    speaker: str
    source: str            # path relative to the data folder
    start_s: float         # span in the (16 kHz) source utterance
    end_s: float
    audio: np.ndarray
    transcript: str | None  # human transcript of exactly this span, if known
    license: str
    note: str = ""


def _repo_split() -> Path:
    return Path(__file__).resolve().parent.parent / "restore" / "training" / "split.json"


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise ValueError(f"{path} does not exist.")
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _trim(x: np.ndarray) -> tuple[int, int]:
    """Sample span of x without leading/trailing silence (keeping a short margin)."""
    import librosa

    _, (a, b) = librosa.effects.trim(x, top_db=TRIM_TOP_DB, frame_length=512, hop_length=128)
    margin = int(TRIM_MARGIN_S * SAMPLE_RATE)
    return max(0, a - margin), min(len(x), b + margin)


def _frame_db(x: np.ndarray, hop: int = 160, win: int = 1600) -> np.ndarray:
    """Smoothed level per 10 ms (100 ms window), in dB."""
    power = np.convolve(x.astype(np.float64) ** 2, np.ones(win) / win, mode="same")[::hop]
    return 10 * np.log10(power + 1e-12)


def _best_cut(duration: float, candidates: list[tuple[float, float]]) -> float | None:
    """Among (time_s, cost) candidates, the cheapest cut leaving both sides >= MIN_SECONDS;
    a cost of 1 per second away from the middle favours even halves."""
    best, best_cost = None, np.inf
    for t, cost in candidates:
        if t < MIN_SECONDS or duration - t < MIN_SECONDS:
            continue
        total = cost + abs(t - duration / 2)
        if total < best_cost:
            best, best_cost = t, total
    return best


def _cuts(duration: float, candidates: list[tuple[float, float]]) -> list[float] | None:
    """Cut points (s) splitting [0, duration] into pieces of MIN..MAX_SECONDS, chosen recursively
    with _best_cut; None when the candidates cannot achieve that."""
    if duration <= MAX_SECONDS:
        return []
    cut = _best_cut(duration, candidates)
    if cut is None:
        return None
    left = _cuts(cut, [(t, c) for t, c in candidates if t < cut])
    right = _cuts(duration - cut, [(t - cut, c) for t, c in candidates if t > cut])
    if left is None or right is None:
        return None
    return left + [cut] + [cut + t for t in right]


def _energy_candidates(x: np.ndarray) -> list[tuple[float, float]]:
    """Every 10 ms a candidate cut whose cost is its level: 10 dB quieter is worth 1 s of imbalance,
    so cuts land in pauses."""
    db = _frame_db(x)
    return [(i * 0.01, (v - db.max()) / 10.0) for i, v in enumerate(db)]


def _tokens(text: str) -> list[tuple[str, list[str]]]:
    """Transcript tokens with the dictionary words each normalises to ('Phil.' -> ['phil'])."""
    from .wer import normalise_text

    return [(tok, normalise_text(tok).split()) for tok in text.split()]


def _aligned_pieces(x: np.ndarray, text: str) -> list[tuple[float, float, str]] | None:
    """A long utterance with a human transcript, split in pauses between words found by forced
    alignment, each piece with its share of the transcript: [(start_s, end_s, text)].
    Leading and trailing silence is cut at the first and last word. None when alignment fails."""
    from .asr import align_words

    tokens = _tokens(text)
    words = [w for _, ws in tokens for w in ws]
    segments = align_words(x, words)
    if not segments:
        return None
    spoken = [(start, end) for w, start, end in segments if not w.startswith("<")]
    first = max(0.0, spoken[0][0] - TRIM_MARGIN_S)
    last = min(len(x) / SAMPLE_RATE, spoken[-1][1] + TRIM_MARGIN_S)
    pauses, words_before = {}, 0
    for word, start, end in segments:
        if word == "<sil>" and 0 < words_before < len(words):
            pauses[round((start + end) / 2 - first, 3)] = (-(end - start) * 5, words_before)
        elif not word.startswith("<"):
            words_before += 1
    cuts = _cuts(last - first, [(t, c) for t, (c, _) in pauses.items()])
    if cuts is None:
        return None
    # Token boundaries: token i starts after `starts[i]` dictionary words.
    starts = np.cumsum([0] + [len(ws) for _, ws in tokens])
    pieces, prev_t, prev_tok = [], 0.0, 0
    for t in cuts + [last - first]:
        # cut times come back through float arithmetic: match them to the nearest pause
        n_words = pauses[min(pauses, key=lambda k: abs(k - t))][1] if t in cuts else len(words)
        tok = int(np.searchsorted(starts, n_words))
        pieces.append((first + prev_t, first + t, " ".join(tok_ for tok_, _ in tokens[prev_tok:tok])))
        prev_t, prev_tok = t, tok
    return pieces


def _pad(x: np.ndarray) -> np.ndarray:
    need = int(MIN_SECONDS * SAMPLE_RATE) - len(x)
    if need <= 0:
        return x
    return np.pad(x, (need // 2, need - need // 2))


def build_pool(data: Path, speakers: list[str]) -> list[Segment]:
    """Every utterance of the given speakers as 3-10 s segments: silence trimmed, long ones split at
    pauses (human transcripts split with them by forced alignment), short ones padded with silence."""
    rows = [r for r in _read_csv(data / "speech" / "manifest.csv") if r.get("speaker") in speakers]
    missing = set(speakers) - {r["speaker"] for r in rows}
    if missing:
        raise ValueError(f"the speech manifest has no utterances of dev speakers {sorted(missing)}.")
    pool = []
    for row in sorted(rows, key=lambda r: r["path"]):
        x = load_audio(data / row["path"])
        a, b = _trim(x)
        x = x[a:b]
        text = (row.get("transcript") or "").strip() or None
        duration = len(x) / SAMPLE_RATE
        pieces: list[tuple[float, float, str | None]] | None = None
        if duration <= MAX_SECONDS:
            pieces = [(0.0, duration, text)]
        elif text:
            pieces = _aligned_pieces(x, text)
        if pieces is None:  # no transcript, or it cannot be aligned: cut at pauses, transcribe later
            cuts = _cuts(duration, _energy_candidates(x)) or []
            edges = [0.0] + cuts + [duration]
            pieces = [(s, e, None) for s, e in zip(edges[:-1], edges[1:])]
        for s, e, t in pieces:
            seg = x[int(round(s * SAMPLE_RATE)) : int(round(e * SAMPLE_RATE))]
            note = "padded with silence to 3 s" if len(seg) < MIN_SECONDS * SAMPLE_RATE else ""
            pool.append(Segment(row["speaker"], row["path"], round(a / SAMPLE_RATE + s, 3),
                                round(a / SAMPLE_RATE + e, 3), _pad(seg), t, row.get("license", ""), note))
    return pool


def _split_more(pool: list[Segment], needed: int) -> list[Segment]:
    """When there are fewer segments than clips, split the longest segments without a human
    transcript at a pause until there are enough (distinct speech for every clip)."""
    pool = list(pool)
    while len(pool) < needed:
        splittable = [s for s in pool if s.transcript is None and len(s.audio) >= 2 * MIN_SECONDS * SAMPLE_RATE + 1]
        if not splittable:
            break
        seg = max(splittable, key=lambda s: (len(s.audio), s.source, s.start_s))
        cut = _best_cut(len(seg.audio) / SAMPLE_RATE, _energy_candidates(seg.audio))
        if cut is None:
            break
        k = int(cut * SAMPLE_RATE)
        i = pool.index(seg)
        pool[i : i + 1] = [
            Segment(seg.speaker, seg.source, seg.start_s, round(seg.start_s + cut, 3), seg.audio[:k], None,
                    seg.license, seg.note),
            Segment(seg.speaker, seg.source, round(seg.start_s + cut, 3), seg.end_s, seg.audio[k:], None,
                    seg.license, seg.note)]
    return pool


def choose(pool: list[Segment], per_type: int, seed: int,
           types: tuple[str, ...] = TYPES) -> list[tuple[str, Segment]]:
    """Deal segments to degradation types: every human-transcribed segment first, then the others
    round-robin over speakers; shuffled with the seed so no type gets one speaker. Reuses segments
    only when there are fewer than needed."""
    needed = per_type * len(types)
    by_speaker: dict[str, list[Segment]] = {}
    for seg in sorted(pool, key=lambda s: (s.transcript is None, s.source, s.start_s)):
        by_speaker.setdefault(seg.speaker, []).append(seg)
    ordered = [s for s in pool if s.transcript is not None]
    queues = {k: [s for s in v if s.transcript is None] for k, v in sorted(by_speaker.items())}
    while any(queues.values()):
        for q in queues.values():
            if q:
                ordered.append(q.pop(0))
    picked = [ordered[i % len(ordered)] for i in range(needed)]
    rng = np.random.default_rng(seed)
    picked = [picked[i] for i in rng.permutation(needed)]
    return [(types[i % len(types)], seg) for i, seg in enumerate(picked)]


def _seed_for(clip_id: str, seed: int) -> int:
    return int(hashlib.sha256(f"{seed}:{clip_id}".encode()).hexdigest()[:8], 16)


def build_testset(data: str | Path, out: str | Path, split: str | Path | None = None, per_type: int = 8,
                  seed: int = 0, p_real_rir: float = 0.5, overwrite: bool = False, asr: bool = True,
                  quiet: bool = False, profile: str = "mild") -> Path:
    """Build the test set; returns the manifest path. Raises ValueError on bad input.

    With `asr` off, clips without a human transcript get none (eval.run then transcribes the clean
    reference itself, with the same recogniser).
    """
    import restore.training.degrade as degrade_module
    from restore.training.degrade import DegradeConfig, degrade_clip

    data, out = Path(data), Path(out)
    types = profile_types(profile)
    kinds_of = {k.name: k for k in REAL_KINDS}
    if not data.is_dir():
        raise ValueError(f"data folder {data} does not exist.")
    if per_type < 1:
        raise ValueError("--per-type must be at least 1.")
    if (out / "manifest.csv").exists():
        if not overwrite:
            raise ValueError(f"{out} already holds a test set; pass --overwrite to replace it.")
        for sub in ("clean", "degraded"):  # only the files this command writes
            for f in (out / sub).glob("*.wav"):
                f.unlink()
    split_path = Path(split) if split else _repo_split()
    if not split_path.is_file():
        raise ValueError(f"split file {split_path} does not exist.")
    spl = json.loads(split_path.read_text())
    speakers, noise_names, rir_names = spl["dev_speakers"], spl["dev_noises"], spl["dev_rirs"]
    for name in noise_names + rir_names:
        if not (data / name).is_file():
            raise ValueError(f"the split names {name}, which is not in {data}.")
    noises = [load_audio(data / n) for n in noise_names]   # resampled to 16 kHz here
    rirs = [load_audio(data / r) for r in rir_names]
    # Half the reverberant clips use the recorded dev room (the default 0.25 is the training mix):
    # the test set should show how the restorer copes with a real, unseen room.
    config = DegradeConfig(p_real_rir=p_real_rir)

    pool = _split_more(build_pool(data, speakers), per_type * len(types))
    plan = choose(pool, per_type, seed, types)
    if not quiet:
        print(f"[testset] {len(pool)} segments from {len(speakers)} speakers -> {len(plan)} clips",
              file=sys.stderr, flush=True)

    if asr:
        from .asr import transcribe

    rows, counters = [], {t: 0 for t in types}
    for kind, seg in plan:
        clip_id = f"{kind}_{counters[kind]:02d}_{seg.speaker}"
        spec = kinds_of.get(kind) if profile == "real" else None
        if spec is not None:
            kinds = list(spec.effects)
            clip_config = dataclasses.replace(config, **dict(spec.ranges))
        else:
            kinds = list(MIXED[counters[kind] % len(MIXED)]) if kind == "mixed" else [kind]
            clip_config = config
        counters[kind] += 1
        clip_seed = _seed_for(clip_id, seed)
        degraded, effects = degrade_clip(seg.audio, seed=clip_seed, kinds=kinds, noises=noises, rirs=rirs,
                                         noise_names=noise_names, rir_names=rir_names, config=clip_config)
        if spec is not None and spec.mp3_kbps:
            kbps = spec.mp3_kbps[np.random.default_rng(clip_seed).integers(len(spec.mp3_kbps))]
            degraded, record = mp3_roundtrip(degraded, int(kbps))
            effects, kinds = effects + [record], kinds + ["mp3"]
        peak = float(np.max(np.abs(degraded)))
        if peak > PEAK:
            degraded = degraded * (PEAK / peak)
            effects = effects + [{"kind": "level", "scaled_db": round(20 * np.log10(PEAK / peak), 2),
                                  "why": "peak above 0.99 before writing 16-bit PCM"}]
        write_audio(out / "clean" / f"{clip_id}.wav", seg.audio)
        write_audio(out / "degraded" / f"{clip_id}.wav", degraded)
        if seg.transcript is not None:
            transcript, ref_kind = seg.transcript, "human"
        elif asr:
            # Transcribe the file as written (16-bit), exactly what the evaluation will decode.
            transcript, ref_kind = transcribe(load_audio(out / "clean" / f"{clip_id}.wav")), "asr_of_clean"
        else:
            transcript, ref_kind = "", ""
        rows.append({"clip_id": clip_id, "speaker": seg.speaker, "source_file": seg.source,
                     "source_start_s": seg.start_s, "source_end_s": seg.end_s, "degradation": kind,
                     "kinds": "+".join(kinds), "params_json": json.dumps(effects, sort_keys=True),
                     "transcript": transcript, "reference_kind": ref_kind,
                     "duration_s": round(len(seg.audio) / SAMPLE_RATE, 3), "seed": clip_seed,
                     "license": seg.license + (f"; {seg.note}" if seg.note else "")})
        if not quiet and len(rows) % 12 == 0:
            print(f"[testset] {len(rows)}/{len(plan)} clips", file=sys.stderr, flush=True)

    rows.sort(key=lambda r: r["clip_id"])
    manifest = out / "manifest.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=MANIFEST_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (out / "testset.json").write_text(json.dumps({
        "data": str(data.resolve()), "split": str(split_path.resolve()), "seed": seed, "per_type": per_type,
        "profile": profile, "types": list(types), "sample_rate": SAMPLE_RATE,
        **({"mixed_combinations": ["+".join(m) for m in MIXED]} if profile == "mild" else
           {"kinds": [{"name": k.name, "effects": list(k.effects), "ranges": dict(k.ranges),
                       "mp3_kbps": list(k.mp3_kbps)} for k in REAL_KINDS]}),
        "dev_speakers": speakers, "dev_noises": noise_names, "dev_rirs": rir_names,
        "degrade_config": config.to_dict(),
        # the simulator's code decides the audio as much as the seed: a changed file means rebuild
        "degrade_py_sha256": hashlib.sha256(Path(degrade_module.__file__).read_bytes()).hexdigest(),
        "segments_available": len(pool), "clips": len(rows),
        "asr_for_missing_transcripts": f"pocketsphinx {metadata.version('pocketsphinx')}" if asr else None,
        "license_note": "Derived from the files listed in source_file; see the data folder's LICENSES.md "
                        "and the license column of manifest.csv. Do not commit this audio.",
    }, indent=2))
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.make_testset", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="data folder with speech/, noise/, rir/ (each with manifest.csv)")
    p.add_argument("--out", required=True, help="output folder for the test set (outside the repository)")
    p.add_argument("--split", help="split file naming the dev speakers, noises and RIRs "
                                   "(default: restore/training/split.json)")
    p.add_argument("--profile", choices=PROFILES, default="mild",
                   help="mild: the nine single-effect types (regression check); real: realistic damage "
                        "(decisions are taken on it)")
    p.add_argument("--per-type", type=int, default=8,
                   help=f"clips per degradation type ({len(TYPES)} mild types, {len(REAL_KINDS)} real ones)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--p-real-rir", type=float, default=0.5,
                   help="share of reverberant clips using the recorded dev RIR instead of a simulated room")
    p.add_argument("--overwrite", action="store_true", help="replace a test set already in --out")
    p.add_argument("--no-asr", action="store_true",
                   help="leave clips without a human transcript untranscribed (eval.run transcribes them)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    try:
        manifest = build_testset(args.data, args.out, args.split, args.per_type, args.seed, args.p_real_rir,
                                 args.overwrite, not args.no_asr, args.quiet, args.profile)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"[testset] wrote {manifest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
