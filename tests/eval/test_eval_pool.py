"""Pooling test sets: every clip of each set once, renamed apart, with its manifest row and each
system's file on it, ready for eval.inputs; folders it did not make are never written into."""

import csv
import shutil

import pytest

from eval.inputs import discover
from eval.pool import main, pool


def test_two_sets_pool_into_one_with_their_systems(tiny_testset, tmp_path):
    root, systems = tiny_testset
    other = tmp_path / "set2"
    shutil.copytree(root, other)
    (other / "degraded" / "hum_01.wav").unlink()  # the second set is not the same as the first
    with open(other / "manifest.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["clip_id"] != "hum_01"]
    with open(other / "manifest.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (other / "clean" / "hum_01.wav").unlink()
    out = tmp_path / "both"
    main([str(root), str(other), "--out", str(out), "--system", f"copy={systems / 'copy'},{systems / 'copy'}"])
    es = discover([f"copy={out / 'systems' / 'copy'}"], testset=out)
    ids = [c.clip_id for c in es.clips]
    assert len(ids) == 11 and "s1_hum_01" not in ids and {"s0_hum_01", "s1_noise_00", "s1_hum_03"} <= set(ids)
    first = next(c for c in es.clips if c.clip_id == "s1_noise_00")
    assert first.transcript == "the red bow" and first.meta["degradation"] == "noise"
    assert (out / "degraded" / "s1_hum_03.wav").resolve() == (other / "degraded" / "hum_03.wav").resolve()
    assert set(es.systems["copy"]) == set(ids)
    # again into the same folder: it was made by eval.pool, so it is refreshed
    pool([root, other], out, {"copy": [systems / "copy", systems / "copy"]})


def test_refusals(tiny_testset, tmp_path):
    root, systems = tiny_testset
    with pytest.raises(ValueError, match="at least two"):
        pool([root], tmp_path / "a")
    with pytest.raises(ValueError, match="one per test set"):
        pool([root, root], tmp_path / "b", {"copy": [systems / "copy"]})
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="did not make"):
        pool([root, root], mine)
    assert (mine / "notes.txt").read_text() == "keep me"
    with pytest.raises(SystemExit, match="NAME=DIR1,DIR2"):
        main([str(root), str(root), "--out", str(tmp_path / "c"), "--system", str(systems / "copy")])
