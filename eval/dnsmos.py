"""DNSMOS P.835 (SIG, BAK, OVRL) through the speechmos package, fully offline.

speechmos ships Microsoft's DNSMOS ONNX models inside the wheel: `dnsmos_models/sig_bak_ovr.onnx`
(the P.835 model of the DNS Challenge's `dnsmos_local.py`, with its polynomial calibration) and
`model_v8.onnx` (P.808). We use its non-personalised model and its scoring code unchanged (9.01 s
windows, 1 s hop, short clips repeated to fill a window), so scores are comparable with published
DNSMOS numbers. It needs onnxruntime.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from importlib import metadata

import numpy as np

from . import SAMPLE_RATE

_MODEL_FILE = "sig_bak_ovr.onnx"
_P808_FILE = "model_v8.onnx"


def _model_dir() -> str:
    import speechmos

    return os.path.join(os.path.dirname(speechmos.__file__), "dnsmos_models")


@lru_cache(maxsize=1)
def model_version() -> str:
    """Which DNSMOS model is scored: package version, model file and the first 12 hex digits of its SHA-256."""
    with open(os.path.join(_model_dir(), _MODEL_FILE), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    return f"speechmos-{metadata.version('speechmos')} DNSMOS P.835 {_MODEL_FILE} sha256:{digest}"


@lru_cache(maxsize=1)
def _scorer(threads: int = 1):
    import onnxruntime as ort
    from speechmos.dnsmos import DNSMOS

    # speechmos builds its ONNX sessions with onnxruntime's default of one thread per core. On a
    # 2-core machine one thread per session is as fast per window (measured) and lets two worker
    # processes score in parallel without fighting over the cores, so we build the sessions here
    # and hand them to speechmos's own scoring code.
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    providers = ["CPUExecutionProvider"]
    scorer = DNSMOS.__new__(DNSMOS)
    scorer.primary_model_path = os.path.join(_model_dir(), _MODEL_FILE)
    scorer.onnx_sess = ort.InferenceSession(scorer.primary_model_path, options, providers=providers)
    scorer.p808_onnx_sess = ort.InferenceSession(os.path.join(_model_dir(), _P808_FILE), options,
                                                 providers=providers)
    return scorer


def dnsmos_p835(x: np.ndarray) -> dict[str, float]:
    """Score one 16 kHz clip: {'sig', 'bak', 'ovrl', 'p808'} on the 1..5 MOS scale.

    Samples beyond [-1, 1] are clipped first (DNSMOS refuses them; a listener hears them clipped).
    """
    x = np.clip(np.asarray(x, dtype=np.float32), -1.0, 1.0)
    if len(x) < SAMPLE_RATE // 10:
        raise ValueError("DNSMOS needs at least 0.1 s of audio.")
    out = _scorer()(x, SAMPLE_RATE, False)
    return {"sig": float(out["sig_mos"]), "bak": float(out["bak_mos"]), "ovrl": float(out["ovrl_mos"]),
            "p808": float(out["p808_mos"])}
