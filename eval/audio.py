"""Reading, listing, hashing and writing audio files for the evaluation."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import soundfile as sf

from . import SAMPLE_RATE

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3")

# Part of every metric version: if the way files are decoded or resampled changes, cached results
# computed from the old audio must not be reused.
LOADER_VERSION = "load16k-mono-soxr_hq-v1"


def load_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Decode a file to mono float32 at `sample_rate` (channels averaged, resampled with soxr_hq)."""
    data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    x = data.mean(axis=1)
    if sr != sample_rate:
        import librosa  # deferred: importing librosa costs time that most callers never need

        x = librosa.resample(x, orig_sr=sr, target_sr=sample_rate, res_type="soxr_hq")
    return np.ascontiguousarray(x, dtype=np.float32)


def write_audio(path: str | Path, x: np.ndarray, sample_rate: int = SAMPLE_RATE,
                subtype: str = "PCM_16") -> None:
    """Write mono audio, creating the parent folder. PCM_16 clips to [-1, 1] as a real file would."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    x = np.asarray(x, dtype=np.float32)
    if subtype.startswith("PCM"):
        x = np.clip(x, -1.0, 1.0)
    sf.write(str(path), x, sample_rate, subtype=subtype)


def list_audio(folder: str | Path) -> dict[str, Path]:
    """Map clip id (file name without extension) to path for the audio files directly in `folder`.

    Raises ValueError (one sentence) when the folder is missing, holds no audio, or holds two files
    with the same clip id.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder {folder} does not exist.")
    found: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.suffix.lower() in AUDIO_EXTENSIONS and not p.name.startswith("."):
            if p.stem in found:
                raise ValueError(f"folder {folder} holds two files for clip {p.stem!r} "
                                 f"({found[p.stem].name} and {p.name}).")
            found[p.stem] = p
    if not found:
        raise ValueError(f"folder {folder} holds no audio files ({', '.join(AUDIO_EXTENSIONS)}).")
    return found


def audio_hash(path: str | Path) -> str:
    """SHA-256 of the decoded audio (sample rate, channel count, samples): the cache key of
    everything computed from the file.

    Not of the file's bytes: libsndfile stamps float WAVs with the time of writing (PEAK chunk), so
    rewriting identical audio changes the bytes, and the same samples as FLAC or WAV would count as
    different files. Decoding makes the key depend on what the metrics actually see.
    """
    data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    h = hashlib.sha256(f"audio-v1|{sr}|{data.shape[1]}|".encode())
    h.update(np.ascontiguousarray(data, dtype=np.float32).tobytes())
    return h.hexdigest()
