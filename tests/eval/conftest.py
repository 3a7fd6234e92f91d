"""Synthetic audio for the evaluation tests: everything is generated here, nothing is downloaded."""

from __future__ import annotations

import numpy as np
import pytest

SR = 16000


def synth_speech(seconds: float = 4.0, seed: int = 0, f0: float = 120.0, tilt: float = 1.0) -> np.ndarray:
    """A speech-like test signal: a glottal-like harmonic series with wandering pitch, two moving
    formant-like resonances, a syllable-rate envelope and pauses. Not speech, but it has the
    structure PESQ, STOI and voice-activity detectors look for."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    t = np.arange(n) / SR
    pitch = f0 * (1 + 0.08 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6)))
    phase = 2 * np.pi * np.cumsum(pitch) / SR
    f1 = 500 + 200 * np.sin(2 * np.pi * 2.1 * t + rng.uniform(0, 6))
    f2 = 1500 + 500 * np.sin(2 * np.pi * 1.3 * t + rng.uniform(0, 6))
    x = np.zeros(n)
    for k in range(1, int(7000 / (f0 * 1.1))):
        fk = k * pitch
        gain = (1 / k**tilt) * (1 + 3 * np.exp(-((fk - f1) / 150) ** 2) + 2 * np.exp(-((fk - f2) / 250) ** 2))
        x += gain * np.sin(k * phase)
    syllables = np.clip(np.sin(2 * np.pi * 3.5 * t + rng.uniform(0, 6)), 0, None) ** 1.5
    phrases = (np.sin(2 * np.pi * 0.35 * t + rng.uniform(0, 6)) > -0.6).astype(float)
    x *= syllables * phrases
    x += 0.02 * rng.standard_normal(n) * syllables  # a little breath noise
    return (0.3 * x / np.max(np.abs(x))).astype(np.float32)


@pytest.fixture
def speech():
    """Factory fixture: speech(seconds=4.0, seed=0, f0=120.0, tilt=1.0) -> float32 array at 16 kHz."""
    return synth_speech


@pytest.fixture
def write_wav():
    """Factory fixture: write_wav(path, x, sr=16000) writes 16-bit PCM and returns the path."""
    import soundfile as sf

    def write(path, x, sr: int = SR, subtype: str = "PCM_16"):
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(path), np.asarray(x, dtype=np.float32), sr, subtype=subtype)
        return path

    return write


@pytest.fixture
def tiny_testset(tmp_path, speech, write_wav):
    """A 6-clip test set in the eval.make_testset layout plus two 'systems':
    'copy' returns the degraded input unchanged, 'half' halves the noise (closer to clean)."""
    import csv

    root = tmp_path / "set"
    rng = np.random.default_rng(1)
    rows = []
    for i in range(6):
        clean = speech(3.0 + 0.5 * i, seed=i, f0=110 + 15 * i)
        noise = rng.standard_normal(len(clean)).astype(np.float32)
        noise *= np.sqrt(np.mean(clean**2) / np.mean(noise**2)) * 10 ** (-5 / 20)  # 5 dB SNR
        clip_id = f"{'noise' if i % 2 == 0 else 'hum'}_{i:02d}"
        write_wav(root / "clean" / f"{clip_id}.wav", clean)
        write_wav(root / "degraded" / f"{clip_id}.wav", clean + noise)
        write_wav(tmp_path / "systems" / "copy" / f"{clip_id}.wav", clean + noise)
        write_wav(tmp_path / "systems" / "half" / f"{clip_id}.wav", clean + 0.5 * noise)
        rows.append({"clip_id": clip_id, "speaker": f"s{i % 3}", "degradation": clip_id.split("_")[0],
                     "transcript": "the red bow" if i < 2 else "", "reference_kind": "human" if i < 2 else ""})
    with open(root / "manifest.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return root, tmp_path / "systems"
