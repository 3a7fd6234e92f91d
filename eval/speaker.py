"""Speaker similarity: cosine between Resemblyzer (GE2E d-vector) embeddings of two clips.

The encoder weights (`pretrained.pt`) ship inside the resemblyzer wheel, so this works offline.
"""

from __future__ import annotations

import importlib.metadata
import sys
import types
from functools import lru_cache

import numpy as np

from . import SAMPLE_RATE


def provide_pkg_resources() -> None:
    """resemblyzer imports webrtcvad 2.0.10, whose only use of `pkg_resources` is reading its own
    version; setuptools >= 81 no longer ships pkg_resources, so the import fails. When it is
    missing, register a stand-in that answers that one question from importlib.metadata."""
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType("pkg_resources")
        stand_in.get_distribution = lambda name: types.SimpleNamespace(  # type: ignore[attr-defined]
            version=importlib.metadata.version(name))
        sys.modules["pkg_resources"] = stand_in


@lru_cache(maxsize=1)
def _encoder():
    provide_pkg_resources()
    from resemblyzer import VoiceEncoder

    return VoiceEncoder("cpu", verbose=False)


def speaker_embedding(x: np.ndarray) -> np.ndarray:
    """256-d unit-norm embedding of a 16 kHz clip (Resemblyzer's own level normalisation and
    long-silence trimming first). Raises ValueError when no voiced audio is left to embed."""
    provide_pkg_resources()
    from resemblyzer import preprocess_wav

    if float(np.max(np.abs(x), initial=0.0)) < 1e-4:
        raise ValueError("the clip is silent, so it has no speaker embedding.")
    encoder = _encoder()
    wav = preprocess_wav(np.asarray(x, dtype=np.float32), source_sr=None)
    if len(wav) < SAMPLE_RATE // 4:
        raise ValueError("too little voiced audio for a speaker embedding.")
    return np.asarray(encoder.embed_utterance(wav), dtype=np.float64)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors (1 = same direction)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    if denom == 0:
        raise ValueError("cosine similarity of a zero vector is undefined.")
    return float(np.dot(a, b) / denom)
