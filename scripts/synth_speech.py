"""Synthesise text-labelled training speech with flite: audio paired with exactly its words.

    python scripts/synth_speech.py ../shared/data .stage/tts --share 0.3
    python scripts/prepare_data.py ../shared/data .stage/data --extra .stage/tts

The training transcripts are mostly pocketsphinx's, about half of their words wrong, and the model
learns to ignore text. Synthesised speech has no such disagreement (tried, it did not change that:
docs/training.md).
The texts are those of the training speakers' clips (human or pseudo-transcripts: any word sequence
serves, since the synthesis says exactly it), one clip per text for `--share` of the training clips,
the voices taken in turn. Writes OUT/speech/tts/VOICE/NNNN.wav and OUT/speech/manifest.csv in the
layout of ../shared/data, which prepare_data.py's --extra reads (training only, never dev).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from pathlib import Path
from typing import Callable

import numpy as np
import soundfile as sf

from make_example import SR, synthesise

ROOT = Path(__file__).resolve().parent.parent
VOICES = ("slt", "rms", "awb", "kal16")  # flite's 16 kHz voices here (kal is 8 kHz)
FIELDS = ["path", "speaker", "gender", "corpus", "duration_s", "sample_rate", "transcript", "license", "notes"]


def training_texts(data: Path, pseudo: dict[str, str]) -> list[str]:
    """The transcripts (human, else pseudo) of the training speakers' clips, in manifest order."""
    dev = set(json.loads((ROOT / "restore" / "training" / "split.json").read_text())["dev_speakers"])
    texts = []
    for r in csv.DictReader(open(data / "speech" / "manifest.csv")):
        text = r["transcript"] or pseudo.get(r["path"], "")
        if r["speaker"] not in dev and len(text.split()) >= 3:
            texts.append(text)
    return texts


def build(texts: list[str], out: Path, share: float, voices: tuple[str, ...], seed: int = 0,
          tts: Callable[[str, str], np.ndarray] = synthesise) -> list[dict]:
    """Synthesise round(share * len(texts)) of the texts (a seeded choice), voices in turn; returns the
    manifest rows it wrote."""
    (out / "speech").mkdir(parents=True, exist_ok=True)
    n = round(share * len(texts))
    chosen = random.Random(seed).sample(texts, n)
    rows = []
    for i, text in enumerate(chosen):
        voice = voices[i % len(voices)]
        audio = tts(text, voice)
        audio = (0.1 * audio / max(float(np.sqrt(np.mean(audio**2))), 1e-6)).clip(-1, 1)
        rel = Path("speech") / "tts" / voice / f"{i:04d}.wav"
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(out / rel, audio, SR, subtype="PCM_16")
        rows.append({"path": str(rel), "speaker": f"tts_{voice}", "gender": "", "corpus": "flite",
                     "duration_s": round(len(audio) / SR, 3), "sample_rate": SR, "transcript": text,
                     "license": "flite voices (CMU, BSD-style)", "notes": "synthesised by scripts/synth_speech.py"})
    with open(out / "speech" / "manifest.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="the shared data folder (its speech/manifest.csv)")
    ap.add_argument("out", type=Path)
    ap.add_argument("--share", type=float, default=0.3, help="synthesised clips per training clip")
    ap.add_argument("--voices", default=",".join(VOICES))
    ap.add_argument("--pseudo", type=Path, default=ROOT / "restore" / "training" / "pseudo_transcripts.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pseudo = json.loads(args.pseudo.read_text()) if args.pseudo.exists() else {}
    texts = training_texts(args.data, pseudo)
    rows = build(texts, args.out, args.share, tuple(args.voices.split(",")), args.seed)
    minutes = sum(r["duration_s"] for r in rows) / 60
    print(f"{len(rows)} clips, {minutes:.1f} min, from {len(texts)} training texts -> {args.out}")


if __name__ == "__main__":
    main()
