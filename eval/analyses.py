"""The cached per-file computations behind the reported metrics, each with a version string.

An analysis maps one decoded file (and, for reference-based ones, the clean reference) to a JSON
value. Its version names everything that can change the value (decoder, library version, model
file, our recipe), so the cache never serves a result computed a different way. Bump the trailing
`vN` of an analysis whenever its code here changes what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Callable

import numpy as np

from .audio import LOADER_VERSION


@dataclass(frozen=True)
class Analysis:
    name: str
    needs_reference: bool
    version_fn: Callable[[], str]
    compute: Callable  # (est) -> value, or (est, ref) -> value when needs_reference

    @property
    def version(self) -> str:
        return f"{LOADER_VERSION}|{self.version_fn()}"


def _pkg(name: str) -> str:
    return f"{name}-{metadata.version(name)}"


def _dnsmos_version() -> str:
    from .dnsmos import model_version

    return f"{model_version()}|v1"


def _asr_version() -> str:
    from .asr import asr_version

    return asr_version()


def _si_sdr(est, ref):
    from .metrics import si_sdr

    return si_sdr(est, ref)


def _pesq(est, ref):
    from .metrics import pesq_wb

    return pesq_wb(est, ref)


def _stoi(est, ref):
    from .metrics import stoi_score

    return stoi_score(est, ref)


def _lag(est, ref):
    from .metrics import estimate_lag_ms

    return estimate_lag_ms(est, ref)


def _dnsmos(est):
    from .dnsmos import dnsmos_p835

    return dnsmos_p835(est)


def _asr(est):
    from .asr import transcribe

    return transcribe(est)


def _asr_jitter_version() -> str:
    from .asr import JITTER_DELAYS, asr_version

    return f"{asr_version()}|delays-{'-'.join(map(str, JITTER_DELAYS))}-v1"


def _asr_jitter(est):
    from .asr import transcribe_delayed

    return transcribe_delayed(est)


def _speaker(est):
    from .speaker import speaker_embedding

    # float32 precision is plenty for a cosine and halves the cache size
    return [round(float(v), 7) for v in np.asarray(speaker_embedding(est), dtype=np.float32)]


ANALYSES: dict[str, Analysis] = {a.name: a for a in (
    Analysis("si_sdr", True, lambda: "si_sdr-zero-mean-v1", _si_sdr),
    Analysis("pesq", True, lambda: f"{_pkg('pesq')}-wb-v1", _pesq),
    Analysis("stoi", True, lambda: f"{_pkg('pystoi')}-classic-v1", _stoi),
    Analysis("lag", True, lambda: "xcorr-200ms-v1", _lag),
    Analysis("dnsmos", False, _dnsmos_version, _dnsmos),
    Analysis("asr", False, _asr_version, _asr),
    Analysis("asr_jitter", False, _asr_jitter_version, _asr_jitter),
    Analysis("speaker_embedding", False, lambda: f"{_pkg('resemblyzer')}-v1", _speaker),
)}


@lru_cache(maxsize=None)
def version_of(name: str) -> str:
    """The full version string of an analysis (computed once per process)."""
    return ANALYSES[name].version


def run_analysis(name: str, est: np.ndarray, ref: np.ndarray | None = None):
    """Compute one analysis on decoded audio."""
    analysis = ANALYSES[name]
    if analysis.needs_reference:
        if ref is None:
            raise ValueError(f"analysis {name} needs a clean reference.")
        return analysis.compute(est, ref)
    return analysis.compute(est)
