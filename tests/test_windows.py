"""restore.pipeline.windows: fixed-shape windows over a stream and the crossfade that stitches them."""

import numpy as np
import pytest

from restore.config import WindowConfig
from restore.pipeline.windows import Geometry, Stitcher, windows

G = Geometry(length=64, overlap=16)  # hop 48


def chunks(x: np.ndarray, size: int):
    for i in range(0, len(x), size):
        yield x[i:i + size]


def cut_and_stitch(x: np.ndarray, g: Geometry, block: int, process=lambda w: w):
    """Window a stream of `x`, run each window through `process`, stitch: (output, windows seen)."""
    stitch, out, seen = Stitcher(g), [], []
    for w, real in windows(chunks(x, block), g, x.shape[1]):
        seen.append((w, real))
        out.append(stitch.push(process(w), real))
    out.append(stitch.finish().reshape(-1, x.shape[1]))
    return np.concatenate(out), seen


def test_geometry_from_seconds():
    wc = WindowConfig()
    g = Geometry.from_seconds(wc.seconds, wc.overlap, 16000, 256)
    assert g.length % 256 == 0 and abs(g.length - 30 * 16000) < 256
    assert g.overlap == 2 * 16000 and g.hop == g.length - g.overlap
    g = Geometry.from_seconds(3.0, 0.5, 16000, 256)
    assert g.length == 48128 and g.length % 256 == 0 and g.overlap == 8000
    with pytest.raises(ValueError):
        Geometry.from_seconds(3.0, 1.6, 16000, 256)  # overlap must stay under half a window
    with pytest.raises(ValueError):
        Geometry.from_seconds(3.0, -0.1, 16000, 256)


@pytest.mark.parametrize("total, expected", [
    (1, 1), (16, 1), (47, 1), (63, 1),   # shorter than one window
    (64, 1),                             # exactly one window
    (65, 2),                             # one sample more
    (64 + 48, 2), (64 + 49, 3),          # exactly two windows, one sample more
    (64 + 48 * 9, 10), (64 + 48 * 9 + 1, 11), (10_000, 208),  # many
])
def test_window_counts_at_edges(total, expected):
    assert G.count(total) == expected
    x = np.ones((total, 1), np.float32)
    _, seen = cut_and_stitch(x, G, block=10)
    assert len(seen) == expected


def test_windows_fixed_shape_and_zero_padded_tail():
    x = np.random.default_rng(0).uniform(0.5, 1.0, (200, 2)).astype(np.float32)  # never zero
    _, seen = cut_and_stitch(x, G, block=33)
    assert len(seen) == 4
    for k, (w, real) in enumerate(seen):
        assert w.shape == (G.length, 2) and w.dtype == np.float32
        start = k * G.hop
        assert real == min(G.length, len(x) - start)
        np.testing.assert_array_equal(w[:real], x[start:start + real])  # window k starts at k * hop
        assert not w[real:].any()
    assert seen[-1][1] == 200 - 3 * 48 < G.length  # the tail window is padded, not reshaped


def test_short_input_is_one_padded_window():
    x = np.ones((5, 1), np.float32)
    _, seen = cut_and_stitch(x, G, block=100)
    (w, real), = seen
    assert real == 5 and w.shape == (64, 1) and w[:5].all() and not w[5:].any()


def test_crossfade_sums_to_one():
    s = Stitcher(Geometry(length=4096, overlap=1000))
    np.testing.assert_allclose(s.fade_in + s.fade_out, 1.0, atol=1e-6)
    assert np.all(np.diff(s.fade_in[:, 0]) > 0)


@pytest.mark.parametrize("g", [G, Geometry(64, 0), Geometry(256, 127)])
@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_identity_stitch_reproduces_input(g, block):
    """Window outputs = inputs: the stitched output is the input, sample for sample, at every length."""
    rng = np.random.default_rng(block)
    for total in list(range(1, 3 * g.length + 5)) + [10 * g.length + 3]:
        x = rng.standard_normal((total, 2)).astype(np.float32)
        y, seen = cut_and_stitch(x, g, block)
        assert y.shape == x.shape, total
        np.testing.assert_allclose(y, x, atol=1e-6, err_msg=f"total {total}")
        assert len(seen) == g.count(total)


def test_stitch_crossfades_between_windows():
    """Windows that output constants k: the overlap ramps smoothly from one to the next."""
    g = Geometry(length=64, overlap=16)
    x = np.zeros((64 + 48, 1), np.float32)
    stitch, out = Stitcher(g), []
    for k, (w, real) in enumerate(windows([x], g, 1)):
        out.append(stitch.push(np.full_like(w, float(k)), real))
    out.append(stitch.finish())
    y = np.concatenate(out)[:, 0]
    assert len(y) == len(x)
    assert np.all(y[:48] == 0) and np.all(y[64:] == 1)
    ramp = y[48:64]
    assert np.all(np.diff(ramp) > 0) and 0 < ramp[0] < 0.1 and 0.9 < ramp[-1] < 1


def test_padding_of_window_outputs_is_dropped():
    """Whatever a model writes into the padding of the tail window never reaches the output."""
    x = np.ones((100, 1), np.float32)

    def process(w):
        w = w.copy()
        w[np.all(w == 0, axis=1)] = 99.0
        return w

    y, _ = cut_and_stitch(x, G, 100, process)
    assert y.shape == x.shape and np.allclose(y, 1.0)
