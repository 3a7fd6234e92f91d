"""The shipped model on the shipped example, against stored statistics of its output (tests/golden.json):
a change to the codec, the sampler, the post-processing or the weights that changes what users hear
fails here, on every platform, within a tolerance far above float noise.

After replacing the shipped model (or changing the audio on purpose), regenerate and review the diff:
    python -m pytest tests/test_golden.py --regen-golden
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from restore import audio, weights
from restore.pipeline.restorer import Restorer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "assets" / "example" / "interview.flac"
GOLDEN = Path(__file__).resolve().parent / "golden.json"
BANDS_HZ = (0, 250, 500, 1000, 2000, 3000, 4000, 6000, 8000)
TOLERANCE_DB = 0.1


def db(power: float) -> float:
    return round(10 * float(np.log10(max(power, 1e-20))), 3)


def statistics(path: Path) -> dict:
    """Level, band energies and a 1 s envelope of a restored file, in dB."""
    x, sr = sf.read(str(path), dtype="float64", always_2d=True)
    x = x.mean(axis=1)
    power, count = audio.active_power(x[:, None].astype(np.float32), sr)
    spec = np.abs(np.fft.rfft(x)) ** 2 / len(x) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / sr)
    bands = {f"{lo}-{hi} Hz": db(spec[(freqs >= lo) & (freqs < hi)].sum()) for lo, hi in zip(BANDS_HZ, BANDS_HZ[1:])}
    return {"frames": len(x), "sample_rate": sr, "rms_db": db(power / count), "peak_db": db(np.abs(x).max() ** 2),
            "bands_db": bands, "envelope_db": [db(np.mean(x[i : i + sr] ** 2)) for i in range(0, len(x), sr)]}


def restore_example(out: Path) -> dict:
    """The default command's restoration (`restore interview.flac -o out.flac`), on the cpu plan: the
    plan every platform has, and the one the statistics were made with."""
    with Restorer(weights.find_model(), plan="cpu") as r:
        rep = r.restore_file(EXAMPLE, out)
    return {"model": weights.load().info.get("run"), "level_gain_db": rep.level_gain_db, **statistics(out)}


@pytest.mark.slow
def test_the_shipped_model_restores_the_example_as_recorded(tmp_path, request):
    got = restore_example(tmp_path / "out.flac")
    if request.config.getoption("--regen-golden"):
        GOLDEN.write_text(json.dumps({"tolerance_db": TOLERANCE_DB, **got}, indent=1) + "\n")
        pytest.skip(f"wrote {GOLDEN}")
    want = json.loads(GOLDEN.read_text())
    tol = want.pop("tolerance_db")
    assert got["model"] == want["model"], "another model is shipped: regenerate with --regen-golden"
    assert (got["frames"], got["sample_rate"]) == (want["frames"], want["sample_rate"])
    for key in ("rms_db", "peak_db", "level_gain_db"):
        assert got[key] == pytest.approx(want[key], abs=tol), key
    for band, value in want["bands_db"].items():
        assert got["bands_db"][band] == pytest.approx(value, abs=tol), band
    assert got["envelope_db"] == pytest.approx(want["envelope_db"], abs=tol)
