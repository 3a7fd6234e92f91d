"""Offline speech recognition with pocketsphinx and the US English model inside its wheel."""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata

import numpy as np

from . import SAMPLE_RATE


def asr_version() -> str:
    """Identifies the recogniser for the cache: package version, model, decoding recipe."""
    return f"pocketsphinx-{metadata.version('pocketsphinx')}-en-us-default-reinitfeat-v1"


@lru_cache(maxsize=1)
def _decoder():
    from pocketsphinx import Decoder

    return Decoder(samprate=SAMPLE_RATE, loglevel="FATAL")


def _to_pcm16(x: np.ndarray) -> bytes:
    return (np.clip(np.asarray(x, dtype=np.float64), -1.0, 1.0) * 32767).round().astype(np.int16).tobytes()


def transcribe(x: np.ndarray) -> str:
    """Recognise one 16 kHz clip; returns lower-case words ('' when nothing is recognised).

    The decoder's cepstral-mean estimate carries over from one utterance to the next, which makes a
    clip's transcript depend on the clip decoded before it (measured: the same file gave two
    different transcripts). Re-initialising the feature front end per clip makes every transcript
    a function of its own audio only, which caching and paired comparisons rely on.
    """
    decoder = _decoder()
    decoder.reinit_feat()
    decoder.start_utt()
    decoder.process_raw(_to_pcm16(x), full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr.strip() if hyp is not None else ""


# The sub-frame delay (samples at 16 kHz) of the second reading behind the jitter-averaged WER:
# half of the recogniser's 10 ms frame step, the grid furthest from the first reading's. Delaying a
# clean clip by 80 samples (5 ms) changes about a quarter of the words the recogniser reads in it, so
# a single reading favours outputs that are sample for sample the reference (docs/evaluation.md).
JITTER_DELAYS = (80,)


def transcribe_delayed(x: np.ndarray, delays=JITTER_DELAYS) -> list[str]:
    """Readings of the clip with `d` samples of silence put in front, for each d in `delays`."""
    x = np.asarray(x)
    return [transcribe(np.concatenate([np.zeros(d, x.dtype), x])) for d in delays]


def align_words(x: np.ndarray, words: list[str]) -> list[tuple[str, float, float]] | None:
    """Force-align known words to a 16 kHz clip: [(token, start_s, end_s)] including '<sil>'
    pauses, or None when a word is not in the dictionary or alignment fails."""
    decoder = _decoder()
    try:
        decoder.reinit_feat()
        decoder.set_align_text(" ".join(words))
        decoder.start_utt()
        decoder.process_raw(_to_pcm16(x), full_utt=True)
        decoder.end_utt()
        segments = [(s.word, s.start_frame / 100.0, (s.end_frame + 1) / 100.0) for s in decoder.seg()]
    except RuntimeError:
        return None
    finally:
        # Alignment mode replaces the language-model search; switch back for later transcriptions.
        _decoder.cache_clear()
    aligned = [w for w, _, _ in segments if not w.startswith("<") and w != "</s>"]
    if [w.split("(")[0] for w in aligned] != words:
        return None
    return segments
