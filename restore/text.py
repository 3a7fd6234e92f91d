"""Transcript -> token ids. Character-level over normalised English text; id 0 is the null token that
starts every sequence (a text-free branch is the null token alone), id 1 pads."""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import torch

NULL_ID = 0
PAD_ID = 1
UNK_ID = 2
_CHARS = " abcdefghijklmnopqrstuvwxyz0123456789'.,?!-"
_INDEX = {ch: i + 3 for i, ch in enumerate(_CHARS)}
VOCAB_SIZE = 3 + len(_CHARS)


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    text = re.sub(r"[\"“”()\[\]{}:;]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def encode(text: str | None, max_tokens: int) -> list[int]:
    """Token ids, null first; None or empty text gives [NULL_ID]."""
    ids = [NULL_ID]
    if text:
        ids += [_INDEX.get(ch, UNK_ID) for ch in normalize(text)][: max_tokens - 1]
    return ids


def tokens(text: str | None) -> int:
    """How many tokens `encode` gives `text` before any cut: the null token and one per character."""
    return 1 + (len(normalize(text)) if text else 0)


def batch(texts: list[str | None], max_tokens: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) ids and (B, L) bool mask of existing keys; L is the longest sequence in the batch."""
    seqs = [encode(t, max_tokens) for t in texts]
    length = max(len(s) for s in seqs)
    ids = np.full((len(seqs), length), PAD_ID, dtype=np.int64)  # filled in numpy: no torch call per row
    mask = np.zeros((len(seqs), length), dtype=bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = True
    # no wait for the device
    return torch.from_numpy(ids).to(device, non_blocking=True), torch.from_numpy(mask).to(device, non_blocking=True)


def window_share(text: str | None, start: float, end: float, duration: float, margin: float = 0.1) -> str | None:
    """The part of a file's transcript that a window from `start` to `end` seconds likely holds,
    assuming an even speaking rate, widened by `margin` (a fraction of the window) on both sides."""
    if not text or duration <= 0:
        return text or None
    words = normalize(text).split()
    if end - start >= duration:
        return " ".join(words)
    span = end - start
    lo = max(0.0, (start - margin * span) / duration)
    hi = min(1.0, (end + margin * span) / duration)
    return " ".join(words[int(lo * len(words)) : int(round(hi * len(words)))]) or None
