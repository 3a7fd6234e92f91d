"""restore.pipeline.windows: fixed-shape windows over a stream and the crossfade that stitches them."""

import numpy as np
import pytest

from restore.config import WindowConfig
from restore.pipeline.windows import Geometry, Part, Stitcher, extents, frame_groups, pack, spans, windows

G = Geometry(length=64, overlap=16)  # hop 48


def chunks(x: np.ndarray, size: int):
    for i in range(0, len(x), size):
        yield x[i:i + size]


def cut_and_stitch(x: np.ndarray, g: Geometry, block: int, process=lambda w: w):
    """Window a stream of `x`, run each window through `process`, stitch: (output, windows seen)."""
    stitch, out, seen = Stitcher(g), [], []
    for w, real in windows(chunks(x, block), g, x.shape[1]):
        seen.append((w, real))
        out.append(stitch.push(process(w)[:real]))
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
        out.append(stitch.push(np.full_like(w, float(k))[:real]))
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


# ---- packing short files into shared windows ----

P = Geometry(length=1000, overlap=100, gap=30, align=16)


def test_geometry_gap_and_alignment_from_seconds():
    g = Geometry.from_seconds(30.0, 2.0, 16000, 256, gap=0.5)
    assert (g.gap, g.align) == (8000, 256)
    with pytest.raises(ValueError):
        Geometry.from_seconds(3.0, 0.5, 16000, 256, gap=-0.1)


def test_pack_lays_short_files_end_to_end_a_gap_apart_on_the_frame_grid():
    items = [(name, n, (1, False), 0) for name, n in [("a", 300), ("b", 250), ("c", 333), ("d", 200), ("e", 999)]]
    groups = list(pack(items, P))
    # b starts 30 after a's end, rounded up to 16: 336; c after b's end (586) + 30 -> 624, ends 957;
    # d does not fit (960 + 200 > 1000): the window closes; nor does e beside d
    assert groups == [[("a", 0), ("b", 336), ("c", 624)], [("d", 0)], [("e", 0)]]
    for group in groups:
        ends = [off + dict((i[0], i[1]) for i in items)[name] for name, off in group]
        assert all(off % P.align == 0 for _, off in group) and max(ends) <= P.length
        assert all(b - a_end >= P.gap for (_, b), a_end in zip(group[1:], ends))


def test_pack_fills_earlier_windows_with_later_files_and_closes_the_oldest():
    from restore.pipeline.windows import OPEN_WINDOWS

    # a (700) leaves room; b (600) does not fit beside it and opens a window; c (200) fills a's
    items = [(name, n, (1, False), 0) for name, n in [("a", 700), ("b", 600), ("c", 200)]]
    assert list(pack(items, P)) == [[("a", 0), ("c", 736)], [("b", 0)]]
    # windows left open are closed oldest first, as soon as more than OPEN_WINDOWS are open
    big = [(f"f{k}", 900, (1, False), 0) for k in range(OPEN_WINDOWS + 2)]
    taken = []
    groups = pack((taken.append(i) or i for i in big), P)
    assert next(groups) == [("f0", 0)] and len(taken) == OPEN_WINDOWS + 1  # as the fifth opens, not at the end
    assert [g for g in groups] == [[(f"f{k}", 0)] for k in range(1, OPEN_WINDOWS + 2)]


def test_long_and_unknown_files_are_groups_of_their_own_and_keys_do_not_mix():
    items = [("a", 100, (1, False), 0), ("long", 1001, (1, False), 0), ("bad", None, None, 0),
             ("stereo", 100, (2, False), 0), ("b", 100, (1, False), 0), ("said", 100, (1, True), 5),
             ("stereo2", 100, (2, False), 0), ("exact", 1000, (1, False), 0)]
    groups = list(pack(items, P))
    assert [("long", 0)] in groups and [("bad", 0)] in groups
    assert [("a", 0), ("b", 144)] in groups                # mono without transcripts together
    assert [("stereo", 0), ("stereo2", 144)] in groups     # stereo apart from mono
    assert [("said", 0)] in groups                          # files with transcripts apart from those without
    assert [("exact", 0)] in groups                         # exactly a window: short, alone
    assert sorted(name for g in groups for name, _ in g) == sorted(i[0] for i in items)
    assert list(pack(items, P)) == groups                   # deterministic


def test_joined_transcripts_stay_within_the_tokens_the_model_reads():
    items = [(k, 100, (1, True), 20) for k in "abcd"]
    # null token + 20 + 1 + 20 = 42 fits 45; a third would need 63
    assert [[name for name, _ in g] for g in pack(items, P, max_tokens=45)] == [["a", "b"], ["c", "d"]]
    assert [[name for name, _ in g] for g in pack(items, P)] == [["a", "b", "c", "d"]]


def test_spans_share_the_frames_between_parts():
    parts = [Part("a", 0, 0, 300), Part("b", 0, 336, 250), Part("c", 0, 624, 333)]
    assert spans(parts, 62, 16) == [(0, 21), (21, 39), (39, 62)]
    assert spans(parts[1:], 62, 16) == [(0, 39), (39, 62)]  # the first part's run starts at 0
    assert spans([Part("x", 3, 0, 1000)], 62, 16) == [(0, 62)]


def test_parts_cut_back_exactly_what_was_laid_in():
    rng = np.random.default_rng(0)
    clips = {name: rng.standard_normal((2, n)).astype(np.float32) for name, n in [("a", 300), ("b", 250), ("c", 333)]}
    (group,) = pack([(k, v.shape[1], (2, False), 0) for k, v in clips.items()], P)
    window = np.zeros((2, P.length), np.float32)
    parts = [Part(name, 0, off, clips[name].shape[1]) for name, off in group]
    for p in parts:
        window[:, p.offset : p.offset + p.length] = clips[p.job]
    for p in parts:
        assert np.array_equal(p.cut(window), clips[p.job])
    covered = np.zeros(P.length, bool)
    for p in parts:
        covered[p.offset : p.offset + p.length] = True
    assert not window[:, ~covered].any()  # the gaps are silent


def test_frame_groups_give_each_part_its_frames_and_their_reach():
    parts = [Part("a", 0, 0, 300), Part("b", 0, 336, 250), Part("c", 0, 624, 333)]
    # own frames (16 a frame): a 0-19, b 21-37, c 39-60; widened by 2, up to halfway between two parts
    g = frame_groups(parts, 64, 16, reach=2)
    assert extents(g) == [(0, 20), (20, 38), (38, 62)]
    assert list(g[60:]) == [3, 3, 0, 0]
    wide = frame_groups([Part("a", 0, 0, 160), Part("b", 0, 640, 160)], 64, 16, reach=3)
    assert extents(wide) == [(0, 13), (37, 53)] and not wide[13:37].any() and not wide[53:].any()
    # a window of one file is all its own, its padding included
    assert (frame_groups([Part("x", 0, 0, 100)], 64, 16, reach=3) == 1).all()
    assert extents(frame_groups([Part("x", 0, 0, 100)], 64, 16)) == [(0, 64)]


def test_spin_and_unspin_move_each_copy_by_its_grid_offset_and_back():
    import torch

    from restore.pipeline.windows import grid_offsets, spin, unspin

    assert grid_offsets(1, 256) == [0] and grid_offsets(2, 256) == [0, 128] and grid_offsets(3, 256) == [0, 85, 170]
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32))
    offsets = grid_offsets(4, 256)
    spun = spin(x, offsets)
    assert spun.shape == (8, 1000)
    for k, s in enumerate(offsets):  # copy k is the window delayed by its offset, zeros before it
        np.testing.assert_array_equal(spun[2 * k : 2 * k + 2, s:].numpy(), x[:, : 1000 - s].numpy())
        assert not spun[2 * k : 2 * k + 2, :s].any()
    np.testing.assert_allclose(unspin(spun.numpy(), offsets), x.numpy(), rtol=0, atol=1e-6)
    # copies that differ are averaged where they cover a sample; the window's last samples by fewer
    moved = spun.numpy() + np.repeat(np.arange(4, dtype=np.float32), 2)[:, None]
    back = unspin(moved, offsets)
    np.testing.assert_allclose(back[:, :1000 - offsets[-1]] - x[:, :1000 - offsets[-1]].numpy(), 1.5, atol=1e-5)
    np.testing.assert_allclose(back[:, -1] - x[:, -1].numpy(), 0.0, atol=1e-6)  # the first copy alone
