"""Training windows: drawn on the host as a plan of pieces, assembled on the device in one gather that
gives exactly what copying the pieces one by one gives, with silent gaps and tails."""

import pytest
import torch

from restore.training.data import TrainingData


def test_windows_are_the_planned_pieces_copied_one_by_one(train_data_dir):
    window = 16000 * 10  # the fixture's utterances are 6 s: every window holds several, with gaps
    data = TrainingData(train_data_dir, "cpu", window, seed=1, max_gap_s=0.4)
    plan = data.plan(8)
    rows = [row for row, *_ in plan.pieces]
    assert max(rows.count(r) for r in range(8)) >= 2
    expected = torch.zeros(8, window)
    for row, pos, start, n in plan.pieces:
        expected[row, pos : pos + n] = data.speech[start : start + n].float() / 32768
    got = data.assemble(data.speech, plan)
    assert torch.equal(got, expected)
    gaps = [b[1] - (a[1] + a[3]) for a, b in zip(plan.pieces, plan.pieces[1:]) if a[0] == b[0]]
    assert max(gaps) > 0  # some silence between pieces was checked
    assert any(end < window for end in plan.ends)  # and some zero tails
    for row, end in enumerate(plan.ends):
        assert not got[row, end:].any()


def test_window_batch_limits_the_peak_and_is_a_function_of_the_random_state(train_data_dir):
    a = TrainingData(train_data_dir, "cpu", 16000 * 10, seed=4)
    b = TrainingData(train_data_dir, "cpu", 16000 * 10, seed=4)
    clean, target, texts, ends = a.window_batch(6)
    again = b.window_batch(6)
    assert torch.equal(clean, again[0]) and texts == again[2] and torch.equal(ends, again[3])
    assert target is clean
    assert clean.abs().amax().item() <= 0.99 + 1e-6
    assert (clean.abs().amax(-1) > 0).all()


def test_windows_shorter_than_the_shortest_draw_are_planned_whole(train_data_dir):
    """Short windows are drawn from 3 s up; a window under 3 s (a quick CPU check) is kept whole, not refused."""
    data = TrainingData(train_data_dir, "cpu", 16000 * 2, seed=0, p_short=1.0)
    plan = data.plan(4)
    assert plan.ends == [16000 * 2] * 4


def test_speed_changes_length_and_pitch_and_keeps_texts(train_data_dir):
    from restore.training.data import Clip, change_speed

    sr = 16000
    tone = torch.sin(2 * torch.pi * 440 * torch.arange(sr) / sr) * 10000
    bank = tone.round().short()
    fast, clips = change_speed(bank, [Clip(0, sr, "la la", "spk")], 1.1)
    (c,) = clips
    assert c.length == round(sr / 1.1) and len(fast) == c.length and c.text == "la la" and c.words == ["la", "la"]
    spec = torch.fft.rfft(fast.float()).abs()
    peak_hz = spec.argmax().item() * sr / c.length
    assert abs(peak_hz - 484) < 3  # 440 Hz played 1.1 times faster
    assert abs(fast.float().square().mean().sqrt() / tone.square().mean().sqrt() - 1) < 0.02  # same level

    data = TrainingData(train_data_dir, "cpu", sr * 4, seed=0, speeds=(0.9, 1.0, 1.1))
    base = TrainingData(train_data_dir, "cpu", sr * 4, seed=0)
    assert len(data.clips) == 3 * len(base.clips)
    speakers = {c.speaker for c in data.clips}
    assert {c.speaker for c in base.clips} < speakers and any(s.endswith("@0.9") for s in speakers)
    lengths = {c.speaker: c.length for c in data.clips}
    spk = base.clips[0].speaker
    assert lengths[f"{spk}@0.9"] > lengths[spk] > lengths[f"{spk}@1.1"]
    for c in data.clips:  # every clip lies inside the bank
        assert c.start + c.length <= len(data.speech)
    with pytest.raises(ValueError, match="speeds"):
        TrainingData(train_data_dir, "cpu", sr * 4, speeds=(3.0,))
