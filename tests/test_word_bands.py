"""scripts/word_bands.py: the input put back band by band, and the per-clip mean WER per variant."""

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("word_bands", ROOT / "scripts" / "word_bands.py")
word_bands = importlib.util.module_from_spec(spec)
spec.loader.exec_module(word_bands)

SR = 16000


def _tone(hz, n=SR):
    return 0.1 * np.sin(2 * np.pi * hz * np.arange(n) / SR)


def test_bands_split_the_signal_and_put_back_only_their_band():
    x = _tone(500) + _tone(2000) + _tone(5000)
    parts = [word_bands.band(x, 0, 1000), word_bands.band(x, 1000, 3000), word_bands.band(x, 3000, SR)]
    np.testing.assert_allclose(sum(parts), x, atol=1e-9)
    np.testing.assert_allclose(parts[1], _tone(2000), atol=1e-6)
    deg, out = _tone(500) + _tone(2000), _tone(5000)
    v = word_bands.variants(deg, out, cutoff=3000.0)
    np.testing.assert_allclose(v["input below cut-off"], deg + out, atol=1e-6)
    np.testing.assert_allclose(v["input >3k"], np.zeros_like(out), atol=1e-6)
    assert "input below cut-off" not in word_bands.variants(deg, out, None)


def test_main_reports_the_per_clip_mean_for_each_variant(tmp_path, monkeypatch, capsys):
    # a stand-in recogniser: it hears "one two" when the 5 kHz tone is there, else "one"
    calls = []

    def stand_in(x):
        calls.append(1)
        return "one two" if np.abs(word_bands.band(x, 4000, 6000)).max() > 0.05 else "one"
    monkeypatch.setattr(word_bands, "transcribe", stand_in)
    cache = ["--cache", str(tmp_path / "cache.sqlite")]
    ts, sysdir = tmp_path / "set", tmp_path / "sys"
    for d in ("clean", "degraded"):
        (ts / d).mkdir(parents=True)
    sysdir.mkdir()
    rows = []
    for i, cutoff in enumerate([4000.0, 6000.0]):
        cid = f"bandlimit_{i:02d}"
        clean = _tone(500) + _tone(5000)
        degraded = _tone(500) + (_tone(5000) if cutoff > 5000 else 0)
        sf.write(ts / "clean" / f"{cid}.wav", clean, SR)
        sf.write(ts / "degraded" / f"{cid}.wav", degraded, SR)
        sf.write(sysdir / f"{cid}.wav", _tone(500), SR)  # a restoration that loses the 5 kHz tone
        rows.append({"clip_id": cid, "degradation": "bandlimit",
                     "params_json": json.dumps([{"kind": "bandlimit", "cutoff_hz": cutoff}])})
    rows.append({"clip_id": "noise_00", "degradation": "noise", "params_json": "[]"})
    with open(ts / "manifest.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    args = ["--testset", str(ts), "--systems", str(sysdir), "--degradation", "bandlimit", *cache]
    assert word_bands.main(args) == 0
    out = capsys.readouterr().out
    per_clip = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["clip"] for r in per_clip] == ["set/bandlimit_00", "set/bandlimit_01"]
    assert [r["degraded"] for r in per_clip] == [1, 0] and [r["restored"] for r in per_clip] == [1, 1]
    assert [r["input below cut-off"] for r in per_clip] == [1, 0]
    mean = {line.split()[0]: float(line.split()[-3]) for line in out.splitlines() if line.startswith("  ")}
    assert mean["degraded"] == 25.0 and mean["restored"] == 50.0
    # a second run reads every transcript from the cache, and prints the same
    n = len(calls)
    assert n > 0 and word_bands.main(args) == 0 and len(calls) == n
    assert capsys.readouterr().out == out
    assert word_bands.main(["--testset", str(ts), "--systems", str(sysdir), "--degradation", "eq", *cache]) == 1


def test_array_hash_is_the_hash_of_the_same_samples_in_a_mono_file(tmp_path):
    from eval.audio import array_hash, audio_hash, load_audio
    x = (_tone(440) + 0.01 * np.random.default_rng(0).standard_normal(SR)).astype(np.float32)
    sf.write(tmp_path / "x.wav", x, SR, subtype="FLOAT")
    assert array_hash(load_audio(tmp_path / "x.wav")) == audio_hash(tmp_path / "x.wav") == array_hash(x)
    sf.write(tmp_path / "y.wav", x, SR)  # PCM_16: other samples, another key
    assert audio_hash(tmp_path / "y.wav") != array_hash(x)
