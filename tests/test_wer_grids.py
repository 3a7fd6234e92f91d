"""scripts/wer_grids.py: the four pairings of clean and output readings on shared and offset grids."""

import csv
import importlib.util
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("wer_grids", ROOT / "scripts" / "wer_grids.py")
wer_grids = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wer_grids)

SR = 16000


def test_an_input_identical_to_the_clean_clip_loses_its_bonus_across_grids(tmp_path, monkeypatch, capsys):
    # stand-in recogniser: the clean clip (and the input, which is the clean clip) reads 'a b c d' as
    # it is and 'a b c e' delayed; the system's quieter output reads 'a b c f' either way
    calls = []

    def stand_in(x):
        calls.append(1)
        if np.abs(x).max() < 0.45:
            return "a b c f"
        return "a b c d" if x[0] != 0 else "a b c e"

    monkeypatch.setattr(wer_grids, "transcribe", stand_in)
    root = tmp_path / "set"
    rows = []
    for i in range(3):
        cid = f"eq_{i:02d}"
        x = 0.5 * np.cos(np.arange(SR) / (7.0 + i))
        for folder, y in (("clean", x), ("degraded", x), ("systems/quiet", 0.8 * x)):
            (root / folder).mkdir(parents=True, exist_ok=True)
            sf.write(root / folder / f"{cid}.wav", y, SR, subtype="FLOAT")
        rows.append({"clip_id": cid, "reference_kind": "asr_of_clean"})
    rows.append({"clip_id": "human_00", "reference_kind": "human"})   # not read: no such files
    with open(root / "manifest.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["clip_id", "reference_kind"])
        w.writeheader()
        w.writerows(rows)
    args = [str(root), "--system", "quiet", "--cache", str(tmp_path / "c.sqlite")]
    assert wer_grids.main(args) == 0
    out = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert out["same grid, as is"] == "input 0.0%, quiet 25.0% (+25.0 [+25.0, +25.0])"
    assert out["same grid, both delayed"] == "input 0.0%, quiet 25.0% (+25.0 [+25.0, +25.0])"
    assert out["both cross pairings"] == "input 25.0%, quiet 25.0% (+0.0 [+0.0, +0.0])"
    n = len(calls)
    assert n > 0 and wer_grids.main(args) == 0 and len(calls) == n   # every reading from the cache
