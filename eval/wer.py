"""Word error rate with text normalisation, so formatting differences are not counted as errors."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_to_words(n: int) -> str:
    """Cardinal English words for 0 <= n < 10**9 ("21" -> "twenty one"); digits beyond that are
    spelled one by one."""
    if n < 0 or n >= 10**9:
        return " ".join(_ONES[int(d)] for d in str(abs(n)))
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    for size, name in ((10**6, "million"), (1000, "thousand"), (100, "hundred")):
        if n >= size:
            head, rest = divmod(n, size)
            return f"{number_to_words(head)} {name}" + ("" if rest == 0 else " " + number_to_words(rest))
    raise AssertionError("unreachable")


def normalise_text(text: str) -> str:
    """Lower-case words separated by single spaces: accents folded, digits spelled out,
    punctuation and recogniser markers ('<sil>', '[noise]', 'word(2)') removed, hyphens split."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    text = re.sub(r"<[^>]*>|\[[^\]]*\]|\+\+[^+]*\+\+", " ", text)  # <sil>, [noise], ++garbage++
    text = re.sub(r"\(\d+\)", "", text)  # pocketsphinx alternate-pronunciation suffix: word(2)
    text = text.replace("&", " and ").replace("%", " percent ")
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 1,000 -> 1000
    text = re.sub(r"\d+", lambda m: f" {number_to_words(int(m.group()))} ", text)
    text = re.sub(r"[^a-z']+", " ", text)
    words = [w.strip("'") for w in text.split()]
    return " ".join(w for w in words if w)


@dataclass(frozen=True)
class WordErrors:
    substitutions: int
    deletions: int
    insertions: int
    reference_words: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """Errors per reference word; NaN when the reference has no words."""
        return self.errors / self.reference_words if self.reference_words else float("nan")


def word_errors(reference: str, hypothesis: str) -> WordErrors:
    """Levenshtein word alignment (jiwer) of normalised texts."""
    ref, hyp = normalise_text(reference), normalise_text(hypothesis)
    n_ref = len(ref.split())
    if n_ref == 0:
        return WordErrors(0, 0, len(hyp.split()), 0)
    if not hyp:
        return WordErrors(0, n_ref, 0, n_ref)
    import jiwer

    out = jiwer.process_words(ref, hyp)
    return WordErrors(out.substitutions, out.deletions, out.insertions, n_ref)


def jittered_word_errors(references: list[str], hypotheses: list[str]) -> tuple[float, float]:
    """(mean errors, mean reference words) over the pairings of reference reading i with
    hypothesis reading j, i != j.

    Reading i of each signal is taken at the same delay (eval.asr.JITTER_DELAYS, with 0 first), so
    pairing only different delays charges every system the recogniser's own instability alike: an
    output sample-identical to the reference scores the reference's disagreement with itself, not
    0, and nothing else is punished for not being sample-identical.
    """
    if len(references) != len(hypotheses) or len(references) < 2:
        raise ValueError("need two or more readings of each signal, at the same delays.")
    pairs = [(r, h) for i, r in enumerate(references) for j, h in enumerate(hypotheses) if i != j]
    errors = [word_errors(r, h).errors for r, h in pairs]
    words = [len(normalise_text(r).split()) for r, _ in pairs]
    return sum(errors) / len(errors), sum(words) / len(words)
