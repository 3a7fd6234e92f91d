"""Staging the data: the speaker split holds, and synthesised speech (scripts/synth_speech.py) joins
the training clips only, each clip labelled with exactly the text it was made from."""

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
SR = 16000
SPLIT = json.loads((ROOT / "restore" / "training" / "split.json").read_text())


def synth_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location("synth_speech", ROOT / "scripts" / "synth_speech.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def fake_tts(text: str, voice: str) -> np.ndarray:
    """A tone per word, its pitch set by the voice: no synthesiser needed, text and voice recoverable."""
    f0 = {"slt": 220.0, "rms": 110.0}[voice]
    t = np.arange(int(0.2 * SR)) / SR
    return np.concatenate([0.3 * np.sin(2 * np.pi * f0 * t) for _ in text.split()]).astype(np.float32)


def write_folder(root: Path, kind: str, rows: list[tuple[str, str, str, float]]) -> None:
    """rows: (path, speaker, transcript, seconds) -> audio files and manifest.csv under root/kind."""
    rng = np.random.default_rng(len(rows))
    (root / kind).mkdir(parents=True)
    with open(root / kind / "manifest.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["path", "speaker", "transcript", "license"])
        w.writeheader()
        for path, speaker, text, seconds in rows:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            sf.write(root / path, (0.05 * rng.standard_normal(int(seconds * SR))).astype(np.float32), SR)
            w.writerow({"path": path, "speaker": speaker, "transcript": text, "license": "test"})


def test_synthesised_speech_joins_training_only_with_its_own_text(tmp_path):
    data = tmp_path / "data"
    dev = SPLIT["dev_speakers"][0]
    write_folder(data, "speech", [("speech/a.flac", "spk_a", "one two three four", 3.0),
                                  ("speech/b.flac", "spk_b", "five six seven", 3.0),
                                  ("speech/c.flac", "spk_c", "too short", 3.0),
                                  ("speech/d.flac", dev, "dev words are held out", 31.0)])
    write_folder(data, "noise", [("noise/n.flac", "", "", 3.0), (SPLIT["dev_noises"][0], "", "", 3.0)])
    write_folder(data, "rir", [("rir/r.flac", "", "", 0.5), (SPLIT["dev_rirs"][0], "", "", 0.5)])

    synth = synth_module()
    texts = synth.training_texts(data, {})
    assert texts == ["one two three four", "five six seven"]  # dev speakers and texts under 3 words left out
    tts = tmp_path / "tts"
    rows = synth.build(texts, tts, share=1.0, voices=("slt", "rms"), tts=fake_tts)
    assert sorted(r["transcript"] for r in rows) == sorted(texts)
    assert [r["speaker"] for r in rows] == ["tts_slt", "tts_rms"]  # voices in turn
    for r in rows:  # each file says exactly its text: one 0.2 s tone per word
        audio, sr = sf.read(tts / r["path"])
        assert sr == SR and len(audio) == len(r["transcript"].split()) * SR // 5
    many = [f"text number {i}" for i in range(20)]
    chosen = [[r["transcript"] for r in synth.build(many, tmp_path / f"s{seed}{k}", 0.5, ("slt",), seed, fake_tts)]
              for seed, k in ((0, "a"), (0, "b"), (1, "a"))]
    assert len(chosen[0]) == 10 and chosen[0] == chosen[1] != chosen[2]  # a seeded choice

    out = tmp_path / "staged"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "prepare_data.py"), str(data), str(out),
                    "--pseudo", str(tmp_path / "none.json"), "--extra", str(tts)], check=True, cwd=ROOT)
    index = json.loads((out / "speech.json").read_text())
    assert [e["speaker"] for e in index] == ["spk_a", "spk_b", "spk_c", "tts_slt", "tts_rms"]
    assert [e["text_kind"] for e in index] == ["human", "human", "human", "tts", "tts"]
    by_text = {e["text"]: e for e in index if e["text_kind"] == "tts"}
    assert set(by_text) == set(texts)
    assert all(by_text[t]["length"] == len(t.split()) * SR // 5 for t in texts)
    assert np.load(out / "val.npz")["clean"].shape == (1, 30 * SR)  # the dev speaker is validation only


@pytest.mark.slow
def test_validation_windows_can_come_from_training_speech_and_noises(tmp_path):
    """--val-speech train / --val-noise train: the same draw of validation windows, but of speech the
    model was trained on, or degraded with the training noises and rooms (scripts/validate_model.py
    then tells unseen speech from unseen noise); the default stays the held-out side of the split."""
    data = tmp_path / "data"
    dev = SPLIT["dev_speakers"][0]
    write_folder(data, "speech", [("speech/a.flac", "spk_a", "", 31.0), ("speech/d.flac", dev, "", 31.0)])
    write_folder(data, "noise", [("noise/n.flac", "", "", 3.0), (SPLIT["dev_noises"][0], "", "", 3.0)])
    write_folder(data, "rir", [("rir/r.flac", "", "", 0.5), (SPLIT["dev_rirs"][0], "", "", 0.5)])
    source = {who: sf.read(data / f"speech/{name}.flac", dtype="float32")[0][: 30 * SR]
              for who, name in (("train", "a"), ("dev", "d"))}

    val = {}
    for speech, noise in (("dev", "dev"), ("train", "dev"), ("train", "train")):
        out = tmp_path / f"{speech}_{noise}"
        subprocess.run([sys.executable, str(ROOT / "scripts" / "prepare_data.py"), str(data), str(out),
                        "--pseudo", str(tmp_path / "none.json"), "--val-speech", speech, "--val-noise", noise],
                       check=True, cwd=ROOT, capture_output=True)
        val[speech, noise] = np.load(out / "val.npz")
        clean = val[speech, noise]["clean"][0].astype(np.float64)
        for who, x in source.items():
            r = np.dot(clean, x) / np.sqrt(np.dot(clean, clean) * np.dot(x, x))
            assert (r > 0.99) if who == speech else (abs(r) < 0.1), (speech, noise, who, r)
    assert not np.array_equal(val["train", "dev"]["degraded"], val["train", "train"]["degraded"])  # other noises
