"""Pseudo-transcripts: pocketsphinx ASR of clean training speech that has no human transcript.

They give the text-conditioned (sot) branch more labelled audio than the ~2 minutes of human
transcripts in the data set. Results are cached in a JSON file keyed by the manifest path, so an
interrupted run resumes.

    python scripts/pseudo_transcripts.py ../shared/data .stage/pseudo_transcripts.json
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf


def transcribe(decoder, audio: np.ndarray) -> str:
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr if hyp is not None else ""


def main(data_dir: str, out_json: str) -> None:
    from pocketsphinx import Decoder

    data = Path(data_dir)
    out = Path(out_json)
    done = json.loads(out.read_text()) if out.exists() else {}
    rows = [r for r in csv.DictReader(open(data / "speech" / "manifest.csv")) if not r["transcript"]]
    decoder = Decoder(samprate=16000)
    for i, r in enumerate(rows):
        if r["path"] in done:
            continue
        audio, sr = sf.read(data / r["path"], dtype="float32", always_2d=True)
        audio = librosa.resample(audio.mean(1), orig_sr=sr, target_sr=16000) if sr != 16000 else audio.mean(1)
        done[r["path"]] = transcribe(decoder, audio)
        if i % 20 == 0:
            out.write_text(json.dumps(done, indent=0))
            print(f"{i + 1}/{len(rows)}", flush=True)
    out.write_text(json.dumps(done, indent=0))
    print(f"{len(done)} transcripts in {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
