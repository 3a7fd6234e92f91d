"""Finding clips, references, transcripts and systems; one-sentence errors for bad input."""

import numpy as np
import pytest

from eval.audio import list_audio
from eval.inputs import discover, parse_system


def test_discovers_testset_layout(tiny_testset):
    root, systems = tiny_testset
    es = discover([str(systems / "copy"), f"better={systems / 'half'}"], testset=root)
    assert list(es.systems) == ["degraded", "copy", "better", "clean"]
    assert len(es.clips) == 6 and es.has_clean and es.has_degraded
    first = es.clips[0]
    assert first.transcript == "the red bow" and first.reference_kind == "human"
    assert es.clips[-1].transcript is None and es.clips[-1].reference_kind is None
    assert first.meta["degradation"] in ("noise", "hum")


def test_sidecar_transcripts_are_human(tmp_path, speech, write_wav):
    write_wav(tmp_path / "deg" / "a.wav", speech(1.0))
    (tmp_path / "deg" / "a.txt").write_text("Hello there\n")
    es = discover(degraded=tmp_path / "deg")
    assert es.clips[0].transcript == "Hello there" and es.clips[0].reference_kind == "human"
    assert list(es.systems) == ["degraded"]


def test_missing_folder_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        discover([str(tmp_path / "nope")])


def test_no_audio_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="no audio files"):
        discover([str(tmp_path / "empty")])


def test_system_missing_clips_error(tiny_testset):
    root, systems = tiny_testset
    next((systems / "copy").glob("*.wav")).unlink()
    with pytest.raises(ValueError, match=r"system 'copy' has no file for 1 of 6 clips"):
        discover([str(systems / "copy")], testset=root)


def test_system_with_unrelated_names_error(tiny_testset, tmp_path, write_wav):
    root, _ = tiny_testset
    write_wav(tmp_path / "other" / "x.wav", np.zeros(160))
    with pytest.raises(ValueError, match="no file named like any clip"):
        discover([str(tmp_path / "other")], testset=root)


def test_extra_files_are_a_warning(tiny_testset, write_wav):
    root, systems = tiny_testset
    write_wav(systems / "copy" / "stray.wav", np.zeros(160))
    es = discover([str(systems / "copy")], testset=root)
    assert any("stray" in w for w in es.warnings)


def test_duplicate_clip_ids_and_names(tmp_path, write_wav, tiny_testset):
    write_wav(tmp_path / "dup" / "a.wav", np.zeros(160))
    write_wav(tmp_path / "dup" / "a.flac", np.zeros(160))
    with pytest.raises(ValueError, match="two files for clip 'a'"):
        list_audio(tmp_path / "dup")
    root, systems = tiny_testset
    with pytest.raises(ValueError, match="named 'copy'"):
        discover([str(systems / "copy"), str(systems / "copy")], testset=root)
    with pytest.raises(ValueError, match="named 'clean'"):
        discover([f"clean={systems / 'copy'}"], testset=root)


def test_manifest_problems(tmp_path, tiny_testset):
    root, _ = tiny_testset
    bad = tmp_path / "bad.csv"
    bad.write_text("name,transcript\na,hello\n")
    with pytest.raises(ValueError, match="no clip_id column"):
        discover(testset=root, manifest=bad)
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("clip_id,transcript\nnoise_00,hi\nzzz,hello\n")
    with pytest.raises(ValueError, match="the clean folder has no file for 1 of 2 clips"):
        discover(testset=root, manifest=unknown)


def test_parse_system():
    assert parse_system("/a/b/rnnoise/") == ("rnnoise", __import__("pathlib").Path("/a/b/rnnoise/"))
    assert parse_system("pro=/x/y")[0] == "pro"
    with pytest.raises(ValueError):
        parse_system("=/x")
