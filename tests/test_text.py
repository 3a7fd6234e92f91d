import torch

from restore import text


def test_encode_and_batch():
    assert text.encode(None, 10) == [text.NULL_ID]
    ids = text.encode("Hello, World!", 100)
    assert ids[0] == text.NULL_ID and len(ids) == 1 + len("hello, world!")
    assert max(ids) < text.VOCAB_SIZE
    assert len(text.encode("x" * 1000, 50)) == 50
    b, m = text.batch(["ab", None, "abcd"], 64)
    assert b.shape == (3, 5) and m.sum(1).tolist() == [3, 1, 5]
    assert (b[~m] == text.PAD_ID).all() and (b[:, 0] == text.NULL_ID).all()


def test_normalize():
    assert text.normalize("  Café  “quoted”\n(text) ") == "cafe quoted text"


def test_window_share():
    t = " ".join(f"w{i}" for i in range(100))
    assert text.window_share(t, 0, 10, 10) == t  # the window covers the file
    part = text.window_share(t, 0, 30, 100, margin=0.0).split()
    assert part[0] == "w0" and len(part) == 30
    mid = text.window_share(t, 50, 60, 100, margin=0.1).split()
    assert mid[0] == "w49" and mid[-1] == "w60"
    assert text.window_share(None, 0, 1, 2) is None
