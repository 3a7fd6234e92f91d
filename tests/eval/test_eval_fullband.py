"""eval.fullband's measuring pieces on generated audio (the set itself needs /work/shared/data)."""

import numpy as np

from eval import fullband as ef
from tests.test_fullband import fullband_speech, through_model_rate


def test_room_scales_its_tail_and_passes_speech_at_unit_gain():
    rng = np.random.default_rng(0)
    t = np.arange(int(0.8 * ef.RATE)) / ef.RATE
    rir = 0.2 * rng.standard_normal(len(t)) * np.exp(-6.9 * t / 0.6)
    rir[:1200], rir[1000] = 0.0, 3.0  # the direct sound after a silent pre-delay, reflections from 4 ms on
    direct, whole = ef.room(rir, drr_db=4.0)
    w = int(0.0025 * ef.RATE)
    assert np.array_equal(direct[: 2 * w], whole[: 2 * w]) and not direct[2 * w :].any()
    drr = 10 * np.log10(np.sum(whole[: 2 * w] ** 2) / np.sum(whole[2 * w :] ** 2))
    assert abs(drr - 4.0) < 1e-3
    x = fullband_speech(2.0)
    np.testing.assert_allclose(ef._reverb(x, direct), x, atol=1e-5)  # aligned on the direct sound, unit gain
    wet = ef._reverb(x, whole)
    assert np.corrcoef(wet, x)[0, 1] > 0.5


def test_measure_reads_levels_against_the_reference():
    clean = fullband_speech(3.0)
    rng = np.random.default_rng(1)
    noisy = clean + 0.01 * rng.standard_normal(len(clean)).astype(np.float32)
    row = ef.measure(clean, {"input": noisy, "before": 0.5 * through_model_rate(clean), "after": 2.0 * clean},
                     band_limited=False)
    assert abs(row["after_above8_db"]) < 0.01                # levelled to the reference: the clean itself
    assert max(abs(row[f"after_third_{round(c)}_db"]) for c in ef.THIRDS) < 0.01
    assert row["before_above8_db"] < -60                      # nothing above the model's band
    assert row["input_pause8_db"] == 0.0 and row["after_pause8_db"] < -20  # the noise only the input has


def test_restore_makes_every_output_anew(tiny_model, tmp_path):
    """An output left by an earlier run (other code, other options) is not measured as this run's."""
    import soundfile as sf

    sr = 16000
    t = np.arange(sr) / sr
    (tmp_path / "degraded").mkdir()
    sf.write(tmp_path / "degraded" / "c.wav", (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), sr)
    stale = tmp_path / "after" / "c.wav"
    stale.parent.mkdir()
    sf.write(stale, np.zeros(sr, np.float32), sr)
    ef.restore([{"clip": "c", "kind": "clean"}], tmp_path, tiny_model)
    assert np.abs(sf.read(stale)[0]).max() > 0  # the zeros left there were replaced by a restoration
    assert (tmp_path / "before" / "c.wav").exists()
