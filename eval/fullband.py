"""python -m eval.fullband: issue 46's measurements on a realistic 48 kHz dev set.

  python -m eval.fullband --data /work/shared/data --out /tmp/fullband --markdown docs/eval/fullband.md

Builds the set deterministically from the 48 kHz dev material of restore/training/split.json (the dev
speakers recorded at 48 kHz, the dev noises and dev room resampled to 48 kHz), restores every clip with
a model through the library (`Restorer.restore_file`, its defaults) twice: at 48 kHz, the full-band
output (`after`), and at 16 kHz, the model's band alone as every output was before issue 46 (`before`,
resampled to 48 kHz for the band measurements). Then for the input, before and after, against the clean
reference:

- third-octave levels (100 Hz-20 kHz) and the energy above 8 kHz in speech frames, each output first
  levelled to the reference in 0.5-4 kHz over the speech frames (an output's level is a separate
  matter: the writer levels it to the input's); the input is at the reference's level by construction;
- the noise above 8 kHz in speech pauses (frames where the clean speech is silent in both bands, 27 ms
  away from speech), against the input's;
- for band-limited inputs, the energy above their cut-off (or above the crossover, if that is higher)
  against the input's, and from the cut-off to 8 kHz (the model's band) against the input's, for the
  default output (the model fills the missing band) and for one restored with `extend_band` False
  (`kept`, band-limited clips only: nothing added above the cut-off);
- DNSMOS P.835 at 16 kHz (eval.dnsmos).

Writes <out>/clean, <out>/degraded, <out>/after, <out>/before (float WAV), <out>/clips.csv,
<out>/per_clip.csv and the markdown summary; restorations already in <out> are kept (36 clips, two
restorations each: ~8 min in all on the 2-core CPU machine, about half of it restoring). Speech
frames: the clean speech's 0.3-8 kHz level within 25 dB of its loudest frame. The reference is the
dry speech, and for reverberant clips the speech through the room's direct sound (`room`).
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

RATE = 48000
N_FFT, HOP = 1024, 256            # frames for speech, pauses and the upper band
LONG_FFT = 8192                   # frames for the third-octave levels (5.9 Hz bins)
SNRS = (0, 5, 10, 15)           # dB, cycled over the noise clips
REVERB_SNRS = (5, 10, 15)       # dB, cycled over the noise + reverberation clips
KINDS = ("clean", "noise", "noise", "reverb", "noise+reverb", "band")  # per segment; band: mp3 / phone
RIR_SECONDS = 1.6               # the dev room cut to this long (as in training)
DRRS = (0, 4, 8)                # dB, cycled over the reverberant clips
THIRDS = [1000 * 2.0 ** (k / 3) for k in range(-10, 14)]  # centres 100 Hz-20 kHz
SHOWN = (1000, 4000, 6300, 8000, 10000, 12500, 16000, 20000)  # centres (rounded) in the level table
SYSTEMS = ("input", "before", "after")
BANDS = ((500, 2000), (2000, 4000), (4500, 6500), (8000, 12000), (12000, 24000))  # Hz: the model's and the upper
BAND_LIMITED = ("mp3", "phone")
MODEL_EDGE = 8000               # Hz: the top of the model's band


# ---- the set ----

def _split() -> dict:
    with open(Path(__file__).resolve().parent.parent / "restore" / "training" / "split.json") as f:
        return json.load(f)


def _read(path: Path, rate: int = RATE) -> np.ndarray:
    x, sr = sf.read(str(path), dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    return soxr.resample(x, sr, rate, quality="HQ").astype(np.float32) if sr != rate else x


def segments(data: Path) -> list[dict]:
    """The 48 kHz dev utterances, silence trimmed, each cut in two at its quietest point (3-8 s each)."""
    from .make_testset import _best_cut, _energy_candidates, _trim

    spl = _split()
    with open(data / "speech" / "manifest.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f)
                if r["speaker"] in spl["dev_speakers"] and int(r["sample_rate"]) == RATE]
    if not rows:
        raise SystemExit(f"{data}: no 48 kHz utterances of the dev speakers in speech/manifest.csv")
    out = []
    for row in sorted(rows, key=lambda r: r["path"]):
        x = _read(data / row["path"])
        x16 = soxr.resample(x, RATE, 16000, quality="HQ")
        a, b = (int(v * 3) for v in _trim(x16))
        x, x16 = x[a:b], x16[a // 3 : b // 3]
        cut = _best_cut(len(x16) / 16000, _energy_candidates(x16))
        edges = [0, len(x)] if cut is None else [0, int(cut * RATE), len(x)]
        for k, (s, e) in enumerate(zip(edges[:-1], edges[1:])):
            out.append({"id": f"{row['speaker']}_{k}", "source": row["path"], "start_s": round((a + s) / RATE, 3),
                        "end_s": round((a + e) / RATE, 3), "audio": x[s:e]})
    return out


def _noise(x: np.ndarray, noise: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    start = int(rng.integers(0, max(1, len(noise) - len(x))))
    n = np.resize(np.roll(noise, -start), len(x)).astype(np.float64)
    n *= np.sqrt(np.mean(x.astype(np.float64) ** 2) / max(np.mean(n**2), 1e-20)) / 10 ** (snr_db / 20)
    return n.astype(np.float32)


def room(rir: np.ndarray, drr_db: float) -> tuple[np.ndarray, np.ndarray]:
    """The recorded room from its direct sound on (2.5 ms either side of the peak), its tail scaled to a
    direct-to-reverberant ratio of `drr_db` (the dev room's own is -8 dB: a far-away talker in a hall),
    scaled so that the direct sound passes 0.5-4 kHz at unit gain on average -> (direct sound alone,
    the whole room). The measurement's direct sound is far from flat (its highs lie 10-20 dB down), so
    the reference for a reverberant clip is the speech through the direct sound: what is measured is
    what a restoration takes out (the tail), not the colour of the recording chain."""
    d = int(np.argmax(np.abs(rir)))
    w = int(0.0025 * RATE)
    h = rir[max(0, d - w) :].astype(np.float64)
    direct, tail = h[: 2 * w], h[2 * w :]
    tail = tail * np.sqrt(np.sum(direct**2) / np.sum(tail**2) / 10 ** (drr_db / 10))
    f = np.fft.rfftfreq(4096, 1 / RATE)
    gain = np.sqrt(np.mean(np.abs(np.fft.rfft(direct, 4096)[(f >= 500) & (f < 4000)]) ** 2))
    whole = np.concatenate([direct, tail]) / gain
    return (whole * (np.arange(len(whole)) < 2 * w)).astype(np.float32), whole.astype(np.float32)


def _reverb(x: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """x in the room, its direct sound's peak where x is (so the dry x is the reference)."""
    d = int(np.argmax(np.abs(rir)))
    size = len(x) + len(rir)
    y = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(rir, size), size)
    return y[d : d + len(x)].astype(np.float32)


def _mp3(x: np.ndarray, folder: Path) -> np.ndarray:
    """x through a 48 kbps MP3 (LAME via libsndfile: cut off at ~11.4 kHz), realigned."""
    path = folder / ".tmp.mp3"
    sf.write(str(path), x, RATE, format="MP3", compression_level=0.95, bitrate_mode="CONSTANT")
    y, _ = sf.read(str(path), dtype="float32")
    path.unlink()
    size = 2 * len(y)
    corr = np.fft.irfft(np.fft.rfft(y, size) * np.conj(np.fft.rfft(x, size)), size)
    lag = int(np.argmax(corr[:4000]))  # the codec's delay (1105 samples here)
    return np.pad(y[lag:], (0, len(x)))[: len(x)]


def _phone(x: np.ndarray) -> np.ndarray:
    """A phone line: 8 kHz sampling (nothing above ~3.8 kHz), 300 Hz high-pass."""
    y = soxr.resample(soxr.resample(x, RATE, 8000, quality="HQ"), 8000, RATE, quality="HQ")
    y = np.pad(y, (0, len(x)))[: len(x)]
    spec = np.fft.rfft(y)
    spec[np.fft.rfftfreq(len(y), 1 / RATE) < 300] = 0
    return np.fft.irfft(spec, len(y)).astype(np.float32)


def build(data: Path, out: Path, seed: int = 0) -> list[dict]:
    spl = _split()
    noises = {n: _read(data / n) for n in spl["dev_noises"]}
    rir_name = spl["dev_rirs"][0]
    rir = _read(data / rir_name)
    rir = rir[: int(np.argmax(np.abs(rir))) + int(RIR_SECONDS * RATE)]
    clips, k_noise, k_rev = [], 0, 0
    for s, seg in enumerate(segments(data)):
        for j, kind in enumerate(KINDS):
            rng = np.random.default_rng([seed, s, j])
            clean = seg["audio"]  # the reference: the dry speech, or for reverberant clips its direct sound
            info = {"kind": kind, "snr_db": "", "noise": "", "rir": "", "drr_db": ""}
            if kind == "clean":
                y = clean
            elif kind == "noise":
                name = list(noises)[k_noise % len(noises)]
                snr = SNRS[(k_noise // len(noises) + k_noise) % len(SNRS)]
                y = clean + _noise(clean, noises[name], snr, rng)
                info.update(snr_db=snr, noise=name)
                k_noise += 1
            elif kind == "reverb":
                drr = DRRS[s % len(DRRS)]
                direct, whole = room(rir, drr)
                clean, y = _reverb(clean, direct), _reverb(clean, whole)
                info.update(rir=rir_name, drr_db=drr)
            elif kind == "noise+reverb":
                name = list(noises)[(k_rev + 1) % len(noises)]
                snr = REVERB_SNRS[k_rev % len(REVERB_SNRS)]
                drr = DRRS[(s + 1) % len(DRRS)]
                direct, whole = room(rir, drr)
                clean, wet = _reverb(clean, direct), _reverb(clean, whole)
                y = wet + _noise(wet, noises[name], snr, rng)
                info.update(snr_db=snr, noise=name, rir=rir_name, drr_db=drr)
                k_rev += 1
            else:
                kind = "mp3" if s % 2 == 0 else "phone"
                y = _mp3(clean, out) if kind == "mp3" else _phone(clean)
                info["kind"] = kind
            peak = max(np.abs(y).max(), np.abs(clean).max())
            scale = min(1.0, 0.9 / peak)
            cid = f"{seg['id']}_{j}_{info['kind'].replace('+', '_')}"
            for folder, a in (("clean", clean), ("degraded", y)):
                (out / folder).mkdir(parents=True, exist_ok=True)
                sf.write(str(out / folder / f"{cid}.wav"), a * scale, RATE, subtype="FLOAT")
            clips.append({"clip": cid, "source": seg["source"], "start_s": seg["start_s"], "end_s": seg["end_s"],
                          "seconds": round(len(clean) / RATE, 2), **info})
    with open(out / "clips.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(clips[0]))
        w.writeheader()
        w.writerows(clips)
    return clips


# ---- restoring ----

def restore(clips: list[dict], out: Path, model: Path | None) -> None:
    from restore import Restorer

    with Restorer(model) as r:
        for c in clips:
            src = out / "degraded" / f"{c['clip']}.wav"
            runs = [("after", {}), ("before", {"sample_rate": 16000})]
            if c["kind"] in BAND_LIMITED:
                runs.append(("kept", {"extend_band": False}))
            for system, options in runs:
                dst = out / system / f"{c['clip']}.wav"
                dst.parent.mkdir(parents=True, exist_ok=True)
                # made anew on every run: outputs left by other code or options would be measured as these
                r.restore_file(src, dst, overwrite=True, **options)


# ---- measuring ----

def _spec(x: np.ndarray, n: int = N_FFT) -> np.ndarray:
    from restore.pipeline.fullband import stft

    return np.abs(stft(x, n, n // 4)).astype(np.float64) ** 2  # (T, F)


def frames(clean_power: np.ndarray, freqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(speech, pause) frame masks from the clean reference's power (T, F)."""
    lo = 10 * np.log10(clean_power[:, (freqs >= 300) & (freqs < 8000)].sum(1) + 1e-20)
    hi = 10 * np.log10(clean_power[:, freqs >= 8000].sum(1) + 1e-20)
    quiet = (lo < lo.max() - 45) & (hi < hi.max() - 35)
    pause = quiet.copy()
    for k in range(1, 6):  # 5 frames (27 ms) away from anything louder
        pause[k:] &= quiet[:-k]
        pause[:-k] &= quiet[k:]
    return lo > lo.max() - 25, pause


def _cutoff(x: np.ndarray) -> float:
    """Highest frequency where the input's long-term spectrum is within 60 dB of its peak."""
    p = _spec(x).mean(0)
    f = np.fft.rfftfreq(N_FFT, 1 / RATE)
    db = 10 * np.log10(p + 1e-30)
    return float(f[np.nonzero(db > db.max() - 60)[0].max()])


def _db(a: float, b: float) -> float:
    return float(10 * np.log10(max(a, 1e-30) / max(b, 1e-30)))


def measure(clean: np.ndarray, signals: dict[str, np.ndarray], band_limited: bool) -> dict:
    from restore.pipeline.fullband import CROSSOVER_HZ

    f = np.fft.rfftfreq(N_FFT, 1 / RATE)
    pc = _spec(clean)
    speech, pause = frames(pc, f)
    ref_band = (f >= 500) & (f < 4000)
    up = f >= 8000
    x_in = signals["input"]
    cut = _cutoff(x_in) if band_limited else None
    above_cut = f >= max(cut + 500, CROSSOVER_HZ[1]) if cut is not None else None
    row = {"speech_frames": int(speech.sum()), "pause_frames": int(pause.sum()),
           "cutoff_hz": round(cut) if cut is not None else ""}
    powers = {}
    f_long = np.fft.rfftfreq(LONG_FFT, 1 / RATE)
    long_c = _spec(clean, LONG_FFT).sum(0)
    for name, y in signals.items():
        n = min(len(y), len(clean))
        y = np.pad(y[:n], (0, len(clean) - n))
        p = _spec(y)
        # the input is at the reference's level by construction; an output's level is the writer's matter
        gain = 1.0 if name == "input" else pc[speech][:, ref_band].sum() / max(p[speech][:, ref_band].sum(), 1e-30)
        p *= gain
        powers[name] = p
        row[f"{name}_above8_db"] = _db(p[speech][:, up].sum(), pc[speech][:, up].sum())
        long_y = _spec(y, LONG_FFT).sum(0) * gain
        for c in THIRDS:
            m = (f_long >= c * 2 ** (-1 / 6)) & (f_long < c * 2 ** (1 / 6))
            row[f"{name}_third_{round(c)}_db"] = _db(long_y[m].sum(), long_c[m].sum())
    def in_pauses(p: np.ndarray, m: np.ndarray) -> float | str:
        """p's power in the pauses within bins m against the input's, in dB."""
        return _db(p[pause][:, m].sum(), powers["input"][pause][:, m].sum()) if pause.any() else ""

    for name, p in powers.items():
        row[f"{name}_pause8_db"] = in_pauses(p, up)
        for lo, hi in BANDS:
            m = (f >= lo) & (f < hi)
            row[f"{name}_pause_{lo}_db"] = in_pauses(p, m)
            row[f"{name}_speech_{lo}_db"] = _db(p[speech][:, m].sum(), pc[speech][:, m].sum())
        if above_cut is not None:
            row[f"{name}_above_cut_db"] = _db(p[:, above_cut].sum(), powers["input"][:, above_cut].sum())
        if cut is not None and cut < MODEL_EDGE:  # the missing band within the model's: what it adds there
            m = (f >= cut) & (f < MODEL_EDGE)
            row[f"{name}_cut_to8_db"] = _db(p[:, m].sum(), powers["input"][:, m].sum())
    return row


def score(clips: list[dict], out: Path, dnsmos: bool = True) -> list[dict]:
    from .audio import load_audio

    if dnsmos:
        from .dnsmos import dnsmos_p835
    rows = []
    for c in clips:
        cid = c["clip"]
        clean = _read(out / "clean" / f"{cid}.wav")
        signals = {"input": _read(out / "degraded" / f"{cid}.wav"), "before": _read(out / "before" / f"{cid}.wav"),
                   "after": _read(out / "after" / f"{cid}.wav")}
        if c["kind"] in BAND_LIMITED:
            signals["kept"] = _read(out / "kept" / f"{cid}.wav")
        row = {**c, **measure(clean, signals, c["kind"] in BAND_LIMITED)}
        if dnsmos:
            for name, folder in (("clean", "clean"), ("input", "degraded"), ("before", "before"), ("after", "after")):
                s = dnsmos_p835(load_audio(out / folder / f"{cid}.wav"))
                row.update({f"{name}_{k}": v for k, v in s.items() if k != "p808"})
        rows.append(row)
    with open(out / "per_clip.csv", "w", newline="") as f:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return rows


# ---- the summary ----

GROUPS = (("clean", lambda r: r["kind"] == "clean"),
          ("noise 0-15 dB", lambda r: r["kind"] == "noise"),
          ("noise 10 dB", lambda r: r["kind"] == "noise" and str(r["snr_db"]) == "10"),
          ("reverb", lambda r: r["kind"] == "reverb"),
          ("noise + reverb", lambda r: r["kind"] == "noise+reverb"),
          ("mp3 48 kbps", lambda r: r["kind"] == "mp3"),
          ("phone", lambda r: r["kind"] == "phone"))


def _mean(rows: list[dict], key: str) -> str:
    v = [float(r[key]) for r in rows if r.get(key, "") != ""]
    return f"{np.mean(v):+.1f}" if v else "—"


def _mos(rows: list[dict], key: str) -> str:
    v = [float(r[key]) for r in rows if r.get(key, "") != ""]
    return f"{np.mean(v):.2f}" if v else "—"


def summary(rows: list[dict], command: str, model: str) -> str:
    secs = [float(r["seconds"]) for r in rows]
    lines = [
        "# Full-band outputs on a 48 kHz dev set (issue 46)", "",
        f"{len(rows)} clips of {min(secs):.1f}-{max(secs):.1f} s from the 48 kHz dev speakers (vctk p230, p254, "
        "p273; two pieces of one utterance each), dev noises and the dev room resampled to 48 kHz; model "
        f"`{model}` with its defaults. **input**: the degraded clip; **before**: the model's 16 kHz "
        "restoration alone (every output until issue 46, levelled as the writer does, resampled to 48 kHz); "
        "**after**: the full-band output (`restore/pipeline/fullband.py`); **kept**: the same with "
        "`extend_band` False (`--band keep`; band-limited clips only). Levels in dB, means over clips "
        "of per-clip values; each "
        "output is first levelled to the reference in 0.5-4 kHz over the speech frames (the input is at its "
        "level by construction). The reference is the dry speech, for reverberant clips the speech through "
        "the room's direct sound (the dev room's measurement is far from flat); the room's tail is scaled "
        "to a direct-to-reverberant ratio of 0, 4 or 8 dB.", "",
        "```sh", command, "```", "",
        "## Upper band", "",
        "| clips | speech above 8 kHz vs reference: input / before / after | noise above 8 kHz in pauses vs input: "
        "before / after | largest third-octave error vs reference, 0.1-5 kHz / 6.3-20 kHz: input; after "
        "| above the cut-off vs input: after | cut-off to 8 kHz vs input: before / after / kept |",
        "|---|---|---|---|---|---|"]
    for name, sel in GROUPS:
        g = [r for r in rows if sel(r)]
        if not g:
            continue
        worst = {(s, hi): np.mean([max(abs(float(r[f"{s}_third_{round(c)}_db"])) for c in THIRDS if (c > 5500) == hi)
                                   for r in g]) for s in ("input", "after") for hi in (False, True)}
        thirds = ("— (a band is missing)" if g[0]["kind"] in BAND_LIMITED else
                  f"{worst['input', False]:.1f} / {worst['input', True]:.1f}; {worst['after', False]:.1f} / "
                  f"{worst['after', True]:.1f}")
        lines.append(
            f"| {name} ({len(g)}) | {_mean(g, 'input_above8_db')} / {_mean(g, 'before_above8_db')} / "
            f"{_mean(g, 'after_above8_db')} | {_mean(g, 'before_pause8_db')} / {_mean(g, 'after_pause8_db')} | "
            f"{thirds} | {_mean(g, 'after_above_cut_db')} | {_mean(g, 'before_cut_to8_db')} / "
            f"{_mean(g, 'after_cut_to8_db')} / {_mean(g, 'kept_cut_to8_db')} |")
    lines += ["", "## Third-octave levels vs reference (dB)", "",
              "| clips | system | " + " | ".join(f"{c / 1000:g} kHz" for c in SHOWN) + " |",
              "|---|---|" + "---|" * len(SHOWN)]
    for name, sel in GROUPS:
        g = [r for r in rows if sel(r)]
        if not g:
            continue
        for s in SYSTEMS:
            cells = []
            for c in SHOWN:
                key = f"{s}_third_{round(min(THIRDS, key=lambda t: abs(t - c)))}_db"
                cells.append(_mean(g, key))
            lines.append(f"| {name} ({len(g)}) | {s} | " + " | ".join(cells) + " |")
    lines += ["", "## Per band, after: pauses vs input / speech vs reference (dB)", "",
              "Below 6.5 kHz the output is the model's; 4.5-6.5 kHz is the guide band the upper band follows.", "",
              "| clips | " + " | ".join(f"{lo / 1000:g}-{hi / 1000:g} kHz" for lo, hi in BANDS) + " |",
              "|---|" + "---|" * len(BANDS)]
    for name, sel in GROUPS:
        g = [r for r in rows if sel(r)]
        if g:
            lines.append(f"| {name} ({len(g)}) | " + " | ".join(
                f"{_mean(g, f'after_pause_{lo}_db')} / {_mean(g, f'after_speech_{lo}_db')}" for lo, _ in BANDS) + " |")
    if any("after_ovrl" in r for r in rows):
        lines += ["", "## DNSMOS P.835 at 16 kHz (SIG / BAK / OVRL)", "",
                  "| clips | clean | input | before | after |", "|---|---|---|---|---|"]
        for name, sel in GROUPS:
            g = [r for r in rows if sel(r)]
            if not g:
                continue
            cells = [" / ".join(_mos(g, f"{s}_{k}") for k in ("sig", "bak", "ovrl"))
                     for s in ("clean", "input", "before", "after")]
            lines.append(f"| {name} ({len(g)}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the data folder (speech/, noise/, rir/)")
    ap.add_argument("--out", type=Path, required=True, help="work folder: clips, restorations, per-clip scores")
    ap.add_argument("--model", type=Path, default=None, help="model folder (default: the shipped one)")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the summary here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-dnsmos", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    clips = build(args.data, args.out, args.seed)
    print(f"{len(clips)} clips in {args.out}", file=sys.stderr)
    restore(clips, args.out, args.model)
    rows = score(clips, args.out, dnsmos=not args.no_dnsmos)
    args_given = argv if argv is not None else sys.argv[1:]
    command = "python -m eval.fullband " + " ".join(shlex.quote(a) for a in args_given)
    text = summary(rows, command, str(args.model or "assets/model"))
    print(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
