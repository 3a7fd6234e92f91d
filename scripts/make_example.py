"""Build the shipped example recording: speech synthesised with flite (Debian package `flite`), then
damaged by the project's own degradation simulator (room reverberation, coloured noise, mains hum and
a telephone-like band limit). Deterministic: the same command gives the same file.

    python scripts/make_example.py assets/example
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from restore.training.degrade import DegradeConfig, Degrader  # noqa: E402

TEXT = ("Thanks for joining us today. We recorded this conversation in a small office, "
        "with the window open and an old microphone, so please bear with the sound.")
SR = 16000


def synthesise(text: str, voice: str = "slt") -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tts.wav"
        subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(out)], check=True)
        audio, sr = sf.read(out, dtype="float32")
    return soxr.resample(audio, sr, SR).astype(np.float32) if sr != SR else audio


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    clean = synthesise(TEXT)
    clean = np.concatenate([np.zeros(SR // 2, np.float32), clean, np.zeros(SR // 2, np.float32)])
    clean = 0.1 * clean / np.sqrt(np.mean(clean**2))
    deg = Degrader(DegradeConfig(p_synthetic_noise=1.0, snr_db=(8.0, 8.0), rt60=(0.6, 0.6), drr_db=(2.0, 2.0),
                                 hum_snr_db=(20.0, 20.0), bandwidth_hz=(3800.0, 3800.0)))
    y, rec = deg(torch.from_numpy(clean)[None], torch.Generator().manual_seed(2026),
                 ["reverb", "noise", "hum", "bandlimit"])
    y = y[0].numpy()
    y = 0.5 * y / np.abs(y).max()
    sf.write(out / "interview.flac", y, SR, subtype="PCM_16")
    (out / "interview.txt").write_text(TEXT + "\n")
    print(f"wrote {out / 'interview.flac'} ({len(y) / SR:.1f} s): {rec[0]}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", default=str(Path(__file__).resolve().parent.parent / "assets" / "example"),
                    help="where interview.flac and interview.txt go (default: the checkout's assets/example)")
    main(ap.parse_args().folder)
