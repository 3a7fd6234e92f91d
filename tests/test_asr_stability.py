"""scripts/asr_stability.py: readings of clean clips against their variants, per speaker, cached."""

import csv
import importlib.util
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("asr_stability", ROOT / "scripts" / "asr_stability.py")
asr_stability = importlib.util.module_from_spec(spec)
spec.loader.exec_module(asr_stability)

SR = 16000


def test_variants_keep_the_length_and_delay_or_add_noise():
    x = np.sin(np.arange(SR) / 10.0).astype(np.float32)

    class A:
        delay, noise_db, system = [80], [40.0], []

    v = asr_stability.variants(x, "c", A, np.random.default_rng(0))
    assert set(v) == {"delay 80", "noise 40 dB"} and all(len(y) == len(x) for y in v.values())
    np.testing.assert_array_equal(v["delay 80"][80:], x[:-80])
    assert not v["delay 80"][:80].any()
    noise = v["noise 40 dB"] - x
    assert abs(10 * np.log10(np.mean(x**2) / np.mean(noise**2)) - 40) < 0.5


def test_main_counts_changed_words_per_variant_and_speaker(tmp_path, monkeypatch, capsys):
    # a stand-in recogniser that hears one word per 0.1 of peak level: a quieter variant loses words
    calls = []

    def stand_in(x):
        calls.append(1)
        return " ".join(["word"] * int(round(np.abs(x).max() * 10)))

    monkeypatch.setattr(asr_stability, "transcribe", stand_in)
    ts, restored = tmp_path / "set", tmp_path / "restored"
    (ts / "clean").mkdir(parents=True)
    restored.mkdir()
    rows = []
    for i, (speaker, level) in enumerate([("a", 0.4), ("b", 0.4), ("b", 0.0)]):
        cid = f"clip_{i}"
        x = level * np.sin(np.arange(SR) / 5.0)
        sf.write(ts / "clean" / f"{cid}.wav", x, SR, subtype="FLOAT")
        sf.write(restored / f"{cid}.wav", x * (0.5 if speaker == "b" else 1.0), SR, subtype="FLOAT")
        rows.append({"clip_id": cid, "speaker": speaker})
    with open(ts / "manifest.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["clip_id", "speaker"])
        w.writeheader()
        w.writerows(rows)
    args = [str(ts), "--delay", "80", "--system", f"half={restored}", "--cache", str(tmp_path / "c.sqlite")]
    assert asr_stability.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    # the silent clip has no words and is left out; speaker b's restoration loses 2 of 4 words
    assert out == ["delay 80: all 0%, a 0%, b 0%", "half: all 25%, a 0%, b 50%"]
    n = len(calls)
    assert asr_stability.main(args) == 0 and len(calls) == n   # every reading from the cache
