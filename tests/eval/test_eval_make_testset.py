"""Test set construction from a synthetic data folder: layout, manifest, dev-only material,
one degradation type per clip as recorded, determinism, segmenting and bad input."""

import csv
import hashlib
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("librosa")

from eval.make_testset import MANIFEST_COLUMNS, TYPES, _cuts, _tokens, build_testset, main  # noqa: E402


@pytest.fixture
def data_root(tmp_path, speech, write_wav):
    """speech/, noise/, rir/ with manifests, two dev speakers and one training speaker, plus a split."""
    root = tmp_path / "data"
    speech_rows, seed = [], 0
    for spk, f0, durations in (("dev_a", 110, (2.0, 4.0, 12.5)), ("dev_b", 210, (5.0, 6.0)), ("train_c", 150, (4.0,))):
        for j, d in enumerate(durations):
            path = f"speech/{spk}/{spk}_{j}.flac"
            seed += 1
            write_wav(root / path, speech(d, seed=seed, f0=f0), subtype="PCM_16")
            speech_rows.append({"path": path, "speaker": spk, "transcript": "hello world" if j == 0 else "",
                                "license": "test"})
    _manifest(root / "speech" / "manifest.csv", speech_rows)
    rng = np.random.default_rng(0)
    for name, sr in (("dev_noise", 44100), ("train_noise", 16000)):
        write_wav(root / f"noise/{name}.flac", 0.1 * rng.standard_normal(sr * 3), sr=sr)
    rir = np.zeros(22050, np.float32)
    rir[100] = 1.0
    rir[100:] += 0.3 * rng.standard_normal(22050 - 100).astype(np.float32) * np.exp(-np.arange(22050 - 100) / 3000)
    write_wav(root / "rir/dev_room.flac", rir, sr=44100)
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"dev_speakers": ["dev_a", "dev_b"], "dev_noises": ["noise/dev_noise.flac"],
                                 "dev_rirs": ["rir/dev_room.flac"]}))
    return root, split


def _manifest(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.wav"))}


@pytest.mark.slow
def test_builds_layout_and_manifest(data_root, tmp_path):
    root, split = data_root
    out = tmp_path / "set"
    build_testset(root, out, split, per_type=1, seed=3, asr=False, quiet=True)
    rows = _read(out / "manifest.csv")
    assert list(rows[0]) == list(MANIFEST_COLUMNS)
    info = json.loads((out / "testset.json").read_text())
    assert len(info["degrade_py_sha256"]) == 64 and info["dev_speakers"] == ["dev_a", "dev_b"]
    assert len(rows) == len(TYPES)
    assert sorted(r["degradation"] for r in rows) == sorted(TYPES)
    assert {r["speaker"] for r in rows} <= {"dev_a", "dev_b"}  # never the training speaker
    import soundfile as sf

    for r in rows:
        effects = json.loads(r["params_json"])
        applied = {e["kind"] for e in effects} - {"level"}
        assert applied == set(r["kinds"].split("+"))
        if r["degradation"] != "mixed":
            assert r["kinds"] == r["degradation"]
        else:
            assert len(applied) >= 3
        for e in effects:
            if e["kind"] == "noise" and not e["source"].startswith("synthetic"):
                assert e["source"] == "noise/dev_noise.flac"
            if e["kind"] == "reverb" and e["rir"] != "simulated":
                assert e["rir"] == "rir/dev_room.flac"
        clean, sr = sf.read(out / "clean" / f"{r['clip_id']}.wav")
        degraded, sr2 = sf.read(out / "degraded" / f"{r['clip_id']}.wav")
        assert sr == sr2 == 16000 and len(clean) == len(degraded)
        assert 3.0 <= len(clean) / sr <= 10.0
        assert np.max(np.abs(degraded)) <= 0.9901
        assert r["clip_id"].startswith(r["degradation"] + "_")
        if r["transcript"]:
            assert r["reference_kind"] == "human"


def test_is_deterministic_and_seed_dependent(data_root, tmp_path):
    root, split = data_root
    build_testset(root, tmp_path / "a", split, per_type=1, seed=0, asr=False, quiet=True)
    build_testset(root, tmp_path / "b", split, per_type=1, seed=0, asr=False, quiet=True)
    build_testset(root, tmp_path / "c", split, per_type=1, seed=1, asr=False, quiet=True)
    assert _digest(tmp_path / "a" / "degraded") == _digest(tmp_path / "b" / "degraded")
    assert (tmp_path / "a" / "manifest.csv").read_text() == (tmp_path / "b" / "manifest.csv").read_text()
    assert _digest(tmp_path / "a" / "degraded") != _digest(tmp_path / "c" / "degraded")


@pytest.mark.slow
def test_asr_fills_missing_transcripts(data_root, tmp_path):
    pytest.importorskip("pocketsphinx")
    root, split = data_root
    build_testset(root, tmp_path / "set", split, per_type=1, seed=0, quiet=True)
    rows = _read(tmp_path / "set" / "manifest.csv")
    assert {r["reference_kind"] for r in rows} <= {"human", "asr_of_clean"}
    assert any(r["reference_kind"] == "asr_of_clean" for r in rows)


def test_refuses_to_overwrite_and_bad_input(data_root, tmp_path):
    root, split = data_root
    build_testset(root, tmp_path / "set", split, per_type=1, asr=False, quiet=True)
    with pytest.raises(ValueError, match="already holds a test set"):
        build_testset(root, tmp_path / "set", split, per_type=1, asr=False, quiet=True)
    assert main(["--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x"), "--quiet"]) == 2
    bad_split = tmp_path / "bad.json"
    bad_split.write_text(json.dumps({"dev_speakers": ["nobody"], "dev_noises": [], "dev_rirs": []}))
    with pytest.raises(ValueError, match="no utterances of dev speakers"):
        build_testset(root, tmp_path / "y", bad_split, per_type=1, asr=False, quiet=True)


def test_cuts_make_pieces_of_allowed_length():
    # 25 s with pauses every 4 s: every piece between 3 and 10 s
    candidates = [(t, -1.0) for t in np.arange(4.0, 25.0, 4.0)]
    cuts = _cuts(25.0, candidates)
    edges = [0.0] + cuts + [25.0]
    assert all(3.0 <= b - a <= 10.0 for a, b in zip(edges[:-1], edges[1:]))
    assert _cuts(8.0, candidates) == []
    assert _cuts(25.0, [(1.0, 0.0)]) is None


def test_tokens_keep_original_text_with_dictionary_words():
    assert _tokens("Lord, but I'm 2 late.") == [("Lord,", ["lord"]), ("but", ["but"]), ("I'm", ["i'm"]),
                                                ("2", ["two"]), ("late.", ["late"])]


def test_real_profile_has_its_six_kinds_with_their_ranges_and_a_real_mp3(data_root, tmp_path):
    from eval.make_testset import REAL_KINDS

    root, split = data_root
    out = tmp_path / "real"
    build_testset(root, out, split, per_type=2, seed=0, asr=False, quiet=True, profile="real")
    rows = _read(out / "manifest.csv")
    assert sorted({r["degradation"] for r in rows}) == sorted(k.name for k in REAL_KINDS)
    assert len(rows) == 2 * len(REAL_KINDS)
    assert json.loads((out / "testset.json").read_text())["profile"] == "real"
    import soundfile as sf

    for r in rows:
        effects = {e["kind"]: e for e in json.loads(r["params_json"])}
        if "noise" in effects:
            assert effects["noise"]["source"] == "noise/dev_noise.flac"  # recorded dev noise only
            lo, hi = (0.0, 15.0) if r["degradation"] == "noise" else (5.0, 20.0)
            assert lo <= effects["noise"]["snr_db"] <= hi
        if "reverb" in effects and effects["reverb"]["rir"] == "simulated":
            assert 0.3 <= effects["reverb"]["rt60_s"] <= 1.0
        if r["degradation"] == "bandlimit_noise":
            assert 2000 <= effects["bandlimit"]["cutoff_hz"] <= 4000
        if r["degradation"] == "mp3_noise":
            mp3 = effects["mp3"]
            assert mp3["kbps"] in (16, 24, 32) and abs(mp3["measured_kbps"] - mp3["kbps"]) < 4
            clean, _ = sf.read(out / "clean" / f"{r['clip_id']}.wav")
            deg, _ = sf.read(out / "degraded" / f"{r['clip_id']}.wav")
            assert len(deg) == len(clean)
            lag = np.argmax(np.correlate(deg, clean[2000:-2000], mode="valid")) - 2000
            assert abs(lag) <= 1  # the codec's delay was taken out


def test_unknown_profile_is_refused(data_root, tmp_path):
    root, split = data_root
    with pytest.raises(ValueError, match="unknown profile"):
        build_testset(root, tmp_path / "x", split, per_type=1, asr=False, quiet=True, profile="harsh")
