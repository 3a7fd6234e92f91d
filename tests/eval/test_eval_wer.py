"""WER and its text normalisation on known transcripts."""

import math

import pytest

pytest.importorskip("jiwer")

from eval.wer import jittered_word_errors, normalise_text, number_to_words, word_errors  # noqa: E402


def test_transcript_against_itself_is_zero():
    text = "If the red of the second bow falls upon the green of the first, the result is yellow."
    assert word_errors(text, text).wer == 0.0


@pytest.mark.parametrize("ref, hyp, subs, dels, ins", [
    ("the cat sat on the mat", "the bat sat on the mat", 1, 0, 0),
    ("the cat sat on the mat", "the cat on the mat", 0, 1, 0),
    ("the cat sat on the mat", "the cat sat down on the mat", 0, 0, 1),
    ("a b c d", "", 0, 4, 0),
])
def test_error_counts(ref, hyp, subs, dels, ins):
    we = word_errors(ref, hyp)
    assert (we.substitutions, we.deletions, we.insertions) == (subs, dels, ins)
    assert we.wer == pytest.approx((subs + dels + ins) / len(ref.split()))


def test_normalisation_hides_formatting_only():
    assert word_errors("Hello, World! It's 10 o'clock.", "hello world it's ten o'clock").wer == 0.0
    assert word_errors("Lord, but I'm glad to see you again, Phil.",
                       "<s> lord but i'm glad(2) to see you again phil <sil> </s>").wer == 0.0
    assert word_errors("well-known café", "well known cafe").wer == 0.0
    assert word_errors("Hello world", "hello word").wer == 0.5  # a real error still counts


def test_normalise_text_details():
    assert normalise_text("  God bless 'em!  ") == "god bless em"
    assert normalise_text("[noise] yes ++breath++ no") == "yes no"
    assert normalise_text("1,000 & 5%") == "one thousand and five percent"


@pytest.mark.parametrize("n, words", [(0, "zero"), (13, "thirteen"), (40, "forty"), (21, "twenty one"),
                                      (105, "one hundred five"), (2024, "two thousand twenty four"),
                                      (3_000_017, "three million seventeen")])
def test_number_to_words(n, words):
    assert number_to_words(n) == words


def test_empty_reference_has_undefined_wer():
    assert math.isnan(word_errors("", "something").wer)
    assert word_errors("...", "").reference_words == 0


def test_jittered_errors_pair_readings_at_different_delays_only():
    # reading 0 and reading 1 of the same signal differ by one word: a sample-identical output
    # meets that instability instead of scoring 0 on the pair of equal delays
    refs = ["the cat sat on the mat", "the bat sat on the mat"]
    assert jittered_word_errors(refs, refs) == (1.0, 6.0)           # pairs (0, 1) and (1, 0)
    assert jittered_word_errors(refs, ["the cat sat on the mat"] * 2) == (0.5, 6.0)  # 1 then 0 errors
    errors, words = jittered_word_errors(["a b c d", "a b"], ["a b", "a b c d"])
    assert (errors, words) == (0.0, 3.0)                             # 4 and 2 reference words
    errors, words = jittered_word_errors(["a b c", "a b c", "a b c"], ["a b c", "a b c", "x b c"])
    assert (errors, words) == (pytest.approx(2 / 6), 3.0)           # 6 pairings, 2 with the odd one
    with pytest.raises(ValueError):
        jittered_word_errors(["a"], ["a"])
    with pytest.raises(ValueError):
        jittered_word_errors(["a", "b"], ["a"])
