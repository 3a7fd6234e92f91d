"""The metric cache and the scoring loop: keys, re-use across runs, only new systems scored,
paired summary against a baseline."""

import math

import numpy as np
import pytest

pytest.importorskip("pesq")
pytest.importorskip("pystoi")

from eval.cache import MetricCache, cache_key  # noqa: E402
from eval.inputs import discover  # noqa: E402
from eval.scoring import score  # noqa: E402
from eval.summary import summarise  # noqa: E402

FAST = ["pesq", "stoi", "si_sdr"]


def test_cache_roundtrip_and_key_parts(tmp_path):
    cache = MetricCache(tmp_path / "c.sqlite")
    assert cache.get("pesq", "v1", "aaa", "bbb") is None
    cache.put("pesq", "v1", "aaa", "bbb", 3.25)
    cache.put("dnsmos", "v1", "aaa", None, {"ovrl": 3.0})
    cache.close()
    cache = MetricCache(tmp_path / "c.sqlite")  # persisted
    assert cache.get("pesq", "v1", "aaa", "bbb") == 3.25
    assert cache.get("dnsmos", "v1", "aaa") == {"ovrl": 3.0}
    assert cache.get("pesq", "v2", "aaa", "bbb") is None      # new metric version
    assert cache.get("pesq", "v1", "aab", "bbb") is None      # other file content
    assert cache.get("pesq", "v1", "aaa", "bbc") is None      # other reference
    assert cache.get("stoi", "v1", "aaa", "bbb") is None      # other metric
    assert (cache.hits, cache.misses) == (2, 4)
    assert len({cache_key("m", "v", "f", None), cache_key("m", "v", "f", "r"), cache_key("m", "w", "f", None)}) == 3


def test_scores_and_caches_then_only_new_system_is_computed(tiny_testset):
    root, systems = tiny_testset
    cache = MetricCache(None)
    es = discover([str(systems / "copy")], testset=root)
    rows, stats = score(es, FAST, cache, jobs=1, quiet=True)
    # degraded and copy are byte-identical files: scored once; clean is the reference itself.
    assert stats.computed == 6 * 4 and stats.cached == 0 and not stats.errors
    assert len(rows) == 6 * 3
    by = {(r["clip_id"], r["system"]): r for r in rows}
    clip = es.clips[0].clip_id
    assert by[(clip, "degraded")]["pesq"] == by[(clip, "copy")]["pesq"]
    assert math.isnan(by[(clip, "clean")]["pesq"])
    assert by[(clip, "degraded")]["si_sdr"] == pytest.approx(5.0, abs=0.2)  # built at 5 dB SNR
    assert by[(clip, "degraded")]["lag_ms"] == 0.0

    rows2, stats2 = score(es, FAST, cache, jobs=1, quiet=True)
    assert stats2.computed == 0 and stats2.cached == 6 * 4
    assert [r["pesq"] for r in rows2] == pytest.approx([r["pesq"] for r in rows], nan_ok=True)

    es3 = discover([str(systems / "copy"), str(systems / "half")], testset=root)
    _, stats3 = score(es3, FAST, cache, jobs=1, quiet=True)
    assert stats3.computed == 6 * 4  # the four analyses of the six 'half' files, nothing else


def test_summary_pairs_against_baseline(tiny_testset):
    root, systems = tiny_testset
    es = discover([str(systems / "half")], testset=root)
    rows, _ = score(es, FAST, MetricCache(None), jobs=1, quiet=True)
    s = summarise(rows, list(es.systems), "degraded", "degradation", n_resamples=500)
    si = next(m for m in s.metrics if m.spec.key == "si_sdr")
    # halving the noise amplitude adds 20*log10(2) = 6 dB of SI-SDR on every clip
    assert si.delta["half"].mean == pytest.approx(6.0, abs=0.3)
    assert si.verdict("half") == "better"
    assert si.delta["degraded"].mean == 0.0
    assert si.absolute["clean"].n == 0
    assert s.groups == ["hum", "noise"] and s.group_sizes == {"hum": 3, "noise": 3}
    assert s.checks["half"]["median_lag_ms"] == 0.0


def test_failed_metric_is_reported_not_fatal(tiny_testset, write_wav):
    root, systems = tiny_testset
    for f in (systems / "copy").glob("*.wav"):
        write_wav(f, np.zeros(1600, np.float32))  # silent, and far too short
    es = discover([str(systems / "copy")], testset=root)
    rows, stats = score(es, ["si_sdr"], MetricCache(None), jobs=1, quiet=True)
    silent = [r for r in rows if r["system"] == "copy"]
    assert all(r["length_diff_ms"] < -2000 for r in silent)
    assert all(math.isnan(r["si_sdr"]) for r in silent)
    assert len(stats.errors) == 6 and "silent estimate" in stats.errors[0]
    assert all(r["si_sdr"] == pytest.approx(5.0, abs=0.2) for r in rows if r["system"] == "degraded")


def test_unknown_metric_group(tiny_testset):
    root, _ = tiny_testset
    with pytest.raises(ValueError, match="unknown metric groups"):
        score(discover(testset=root), ["bogus"], MetricCache(None), quiet=True)


def test_audio_hash_follows_samples_not_file_bytes(tmp_path, speech, write_wav):
    import time

    from eval.audio import audio_hash

    x = speech(1.0)
    a = write_wav(tmp_path / "a.wav", x, subtype="FLOAT")
    time.sleep(1.1)  # libsndfile stamps float WAVs with the time of writing
    b = write_wav(tmp_path / "b.wav", x, subtype="FLOAT")
    assert a.read_bytes() != b.read_bytes()
    assert audio_hash(a) == audio_hash(b)
    import soundfile as sf

    pcm = np.round(x * 32767).astype(np.int16)  # exact 16-bit samples for both containers
    sf.write(str(tmp_path / "c.wav"), pcm, 16000)
    sf.write(str(tmp_path / "c.flac"), pcm, 16000)
    pcm_wav, pcm_flac = tmp_path / "c.wav", tmp_path / "c.flac"
    assert audio_hash(pcm_wav) == audio_hash(pcm_flac)  # same samples, other container
    assert audio_hash(pcm_wav) != audio_hash(a)  # 16-bit quantised samples differ from float
    assert audio_hash(write_wav(tmp_path / "d.wav", x, sr=8000)) != audio_hash(pcm_wav)
    assert audio_hash(write_wav(tmp_path / "e.wav", 0.5 * x)) != audio_hash(pcm_wav)


def test_jitter_averaged_wer_pairs_the_readings_of_clean_and_system(tiny_testset, monkeypatch):
    """The jittered WER of a clip pairs the clean reference's reading at one delay with the
    output's at the other; human transcripts are not jittered. Fake recognisers keep it fast and
    the expected numbers exact: the delay-0 reading says 'a b c d' for every file, the delayed
    reading of the 'half' system loses a word."""
    import eval.analyses as A
    from eval.analyses import Analysis

    root, systems = tiny_testset
    half = {str(p) for p in (systems / "half").iterdir()}
    loaded = []

    def fake_load(path):  # scoring loads by path; remember which file each decode is for
        loaded.append(str(path))
        return np.zeros(10)

    monkeypatch.setattr("eval.scoring.load_audio", fake_load)
    monkeypatch.setitem(A.ANALYSES, "asr", Analysis("asr", False, lambda: "fake", lambda est: "a b c d"))
    monkeypatch.setitem(A.ANALYSES, "asr_jitter", Analysis(
        "asr_jitter", False, lambda: "fake", lambda est: ["a b c"] if loaded[-1] in half else ["a b c d"]))
    monkeypatch.setattr("eval.scoring.audio_hash", lambda p: str(p))  # every file its own entry
    A.version_of.cache_clear()
    try:
        es = discover([str(systems / "copy"), str(systems / "half")], testset=root)
        rows, stats = score(es, ["wer"], MetricCache(None), jobs=1, quiet=True)
    finally:
        A.version_of.cache_clear()
    assert not stats.errors
    by = {(r["clip_id"], r["system"]): r for r in rows}
    human, asr = es.clips[0].clip_id, es.clips[2].clip_id   # the fixture: clips 0-1 have transcripts
    assert math.isnan(by[(human, "half")]["wer_jit"]) and by[(human, "half")]["ref_words_jit"] == 0
    assert by[(asr, "copy")]["wer_jit"] == 0.0 and by[(asr, "copy")]["ref_words_jit"] == 4.0
    # 'half': its delay-0 reading matches the reference's delayed one; its delayed reading misses
    # one of the four words of the reference's first: 1 error over 2 pairings
    assert by[(asr, "half")]["wer_jit"] == pytest.approx(0.5 / 4)
    assert by[(asr, "half")]["wer_asr"] == 0.0
    # plain readings of all 6 clips x 4 systems (clean, degraded, copy, half); delayed readings only
    # of the 4 clips whose reference is a reading
    assert stats.computed == 6 * 4 + 4 * 4


@pytest.mark.slow
def test_workers_exit_when_the_scoring_process_is_killed(tmp_path):
    """A killed `eval.run` must not leave its workers scoring on in the background."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pids = tmp_path / "pids"
    script = f"""
import os, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from eval.scoring import _init_worker
with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn"), initializer=_init_worker) as pool:
    workers = [pool.submit(os.getpid).result() for _ in range(4)]
    open({str(pids)!r}, "w").write(" ".join(map(str, set(workers))))
    os.kill(os.getpid(), 9)
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    workers = [int(p) for p in pids.read_text().split()]
    assert workers

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.time() + 20
    while any(alive(p) for p in workers) and time.time() < deadline:
        time.sleep(0.5)
    assert not any(alive(p) for p in workers)
