"""python -m eval.run end to end on a tiny synthetic test set with the fast metrics: report, CSVs,
plots, cache re-use, and clear errors."""

import csv

import pytest

pytest.importorskip("pesq")
pytest.importorskip("pystoi")
pytest.importorskip("matplotlib")

from eval.run import main  # noqa: E402


def _args(root, systems, out, cache, *extra):
    return ["--testset", str(root), str(systems / "half"), "--out", str(out), "--cache", str(cache),
            "--metrics", "pesq,stoi,si_sdr", "--jobs", "1", "--resamples", "300", "--spectrograms", "2",
            "--quiet", *extra]


@pytest.mark.slow
def test_run_writes_report_csvs_and_plots(tiny_testset, tmp_path):
    root, systems = tiny_testset
    out = tmp_path / "report"
    assert main(_args(root, systems, out, tmp_path / "cache.sqlite")) == 0
    report = (out / "report.md").read_text()
    assert "## Headline" in report and "## Against 'degraded' (paired per clip)" in report
    assert "| half |" in report and "**better**" in report  # half the noise: better on every metric
    assert "## Per degradation" in report and "hum (3)" in report
    assert "No delay or length problems found." in report
    assert "1-minute load average" in report and "sha256" not in report  # DNSMOS not run here
    for name in ("metrics.png", "delta_vs_degraded.png", "delta_by_degradation.png"):
        assert (out / "plots" / name).stat().st_size > 5000
        assert f"plots/{name}" in report
    assert len(list((out / "plots" / "spectrograms").glob("*.png"))) == 2

    with open(out / "per_clip.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 * 3 and {"clip_id", "system", "pesq", "stoi", "si_sdr", "lag_ms"} <= set(rows[0])
    with open(out / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    si = next(r for r in summary if r["metric"] == "si_sdr" and r["group"] == "all" and r["system"] == "half")
    assert float(si["delta"]) == pytest.approx(6.0, abs=0.3) and si["verdict"] == "better"


@pytest.mark.slow
def test_second_run_only_scores_new_system(tiny_testset, tmp_path):
    import json

    root, systems = tiny_testset
    cache = tmp_path / "cache.sqlite"
    assert main(_args(root, systems, tmp_path / "r1", cache)) == 0
    assert main(_args(root, systems, tmp_path / "r2", cache, str(systems / "copy"))) == 0
    run = json.loads((tmp_path / "r2" / "run.json").read_text())
    # 'copy' is byte-identical to the degraded input, so it needs nothing new at all
    assert run["computed"] == 0 and run["cached"] > 0


def test_reports_bad_input_in_one_line(tiny_testset, tmp_path, capsys):
    root, systems = tiny_testset
    assert main(["--testset", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "test set folder" in capsys.readouterr().err
    assert main(_args(root, systems, tmp_path / "o", tmp_path / "c", "--baseline", "nobody")) == 2
    assert "baseline 'nobody'" in capsys.readouterr().err
    assert main(_args(root, systems, tmp_path / "o", tmp_path / "c", "--metrics", "mos")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown metric groups") and err.count("\n") == 1


def test_missing_metric_package_is_a_clear_error(tiny_testset, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pystoi" else real(name, *a))
    root, systems = tiny_testset
    assert main(_args(root, systems, tmp_path / "o", tmp_path / "c")) == 2
    assert "metric group 'stoi' needs pystoi" in capsys.readouterr().err


def test_report_prints_the_jitter_floor_of_the_clean_reference(tiny_testset, tmp_path, monkeypatch):
    # stand-in recogniser: every file reads 'a b c d' as it is and 'a b c' delayed, so the clean
    # reference disagrees with itself across the two delays by one word in 3.5 (28.6%)
    import eval.analyses as A
    from eval.analyses import Analysis

    monkeypatch.setitem(A.ANALYSES, "asr", Analysis("asr", False, lambda: "fake", lambda est: "a b c d"))
    monkeypatch.setitem(A.ANALYSES, "asr_jitter", Analysis("asr_jitter", False, lambda: "fake",
                                                           lambda est: ["a b c"]))
    A.version_of.cache_clear()
    try:
        root, systems = tiny_testset
        args = _args(root, systems, tmp_path / "o", tmp_path / "c.sqlite")
        args[args.index("--metrics") + 1] = "wer"
        assert main(args) == 0
    finally:
        A.version_of.cache_clear()
    report = (tmp_path / "o" / "report.md").read_text()
    assert "WER vs ASR of clean, jitter-averaged (%)" in report
    assert "Jitter-averaged WER of the clean reference against itself: 28.6%" in report
