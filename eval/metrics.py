"""Reference-based signal metrics: SI-SDR, wideband PESQ, STOI, and the alignment check.

All take (estimate, reference) as 1-D float arrays at 16 kHz. When the two differ in length the
longer is cut to the shorter: restoration should preserve length, and the length check in the
report flags systems that do not.
"""

from __future__ import annotations

import numpy as np

from . import SAMPLE_RATE


def _common_length(est: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = min(len(est), len(ref))
    if n == 0:
        raise ValueError("cannot score an empty signal.")
    return np.asarray(est[:n], dtype=np.float64), np.asarray(ref[:n], dtype=np.float64)


def si_sdr(est: np.ndarray, ref: np.ndarray) -> float:
    """Scale-invariant signal-to-distortion ratio in dB (Le Roux et al. 2019), zero-mean signals.

    target = a * ref with a = <est, ref> / ||ref||^2;  SI-SDR = 10 log10(||target||^2 / ||est - target||^2).
    """
    est, ref = _common_length(est, ref)
    est = est - est.mean()
    ref = ref - ref.mean()
    ref_energy = np.dot(ref, ref)
    if ref_energy <= 0:
        raise ValueError("SI-SDR is undefined for a silent reference.")
    if np.dot(est, est) <= 1e-20 * ref_energy:
        # Silence has no scale to be invariant to; failing makes the report list the clip.
        raise ValueError("SI-SDR is undefined for a silent estimate.")
    target = (np.dot(est, ref) / ref_energy) * ref
    residual = est - target
    # The tiny floor keeps identical signals finite (about +300 dB) instead of dividing by zero.
    return float(10 * np.log10(max(np.dot(target, target), 1e-30) / max(np.dot(residual, residual), 1e-30)))


def pesq_wb(est: np.ndarray, ref: np.ndarray) -> float:
    """Wideband PESQ (ITU-T P.862.2) at 16 kHz, MOS-LQO from about 1.04 to 4.64.

    Returns NaN when PESQ refuses the pair (e.g. it finds no speech in the reference).
    """
    from pesq import PesqError, pesq

    est, ref = _common_length(est, ref)
    score = pesq(SAMPLE_RATE, ref.astype(np.float32), est.astype(np.float32), "wb",
                 on_error=PesqError.RETURN_VALUES)
    return float("nan") if score < 0 else float(score)


def stoi_score(est: np.ndarray, ref: np.ndarray) -> float:
    """Short-time objective intelligibility (Taal et al. 2011, classic not extended), about 0..1."""
    from pystoi import stoi

    est, ref = _common_length(est, ref)
    return float(stoi(ref, est, SAMPLE_RATE, extended=False))


def estimate_lag_ms(est: np.ndarray, ref: np.ndarray, max_lag_ms: float = 200.0) -> float:
    """Delay of `est` relative to `ref` in ms (positive: est is late), from the peak of the
    cross-correlation within +-max_lag_ms.

    STOI and SI-SDR compare samples in place, so a system with a constant delay is punished on
    them for a bug in its framing rather than its quality; the report shows this lag per system.
    """
    est, ref = _common_length(est, ref)
    max_lag = int(max_lag_ms * SAMPLE_RATE / 1000)
    size = 1 << int(np.ceil(np.log2(2 * len(ref))))
    xcorr = np.fft.irfft(np.fft.rfft(est, size) * np.conj(np.fft.rfft(ref, size)), size)
    # Lags 0..max_lag sit at the start of the circular correlation, negative lags at its end.
    window = np.concatenate([xcorr[-max_lag:], xcorr[: max_lag + 1]]) if max_lag else xcorr[:1]
    lag = int(np.argmax(np.abs(window))) - max_lag
    return float(lag * 1000 / SAMPLE_RATE)
