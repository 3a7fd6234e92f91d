"""End to end through restore.pipeline.Restorer with the tiny random model (plumbing, not quality)."""

import os
import threading

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.conftest import speechlike
from restore import audio, weights
from restore.config import ModelConfig, WindowConfig
from dataclasses import replace

from restore.engines.plan import resolve_plan
from restore.errors import UsageError
from restore.pipeline.restorer import Restorer

SECONDS = 7.0  # three 3 s windows with 0.5 s overlap
FAST = {"sampler": "flash", "steps": 1}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny model's ops are too small for threads to pay, and when another process keeps one of two
    cores busy, two torch threads run ~100x slower than one (they wait on each other)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def restorer(live_model):
    return Restorer(live_model, window=WindowConfig(seconds=3.0, overlap=0.5))


def write(path, x, sr, subtype=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, x, sr, subtype=subtype)
    return path


def stereo(seconds, sr, identical=False):
    a = speechlike(seconds, sr, seed=1)
    b = a.copy() if identical else speechlike(seconds, sr, seed=2)
    return np.stack([a, b], axis=1)


def restored(path):
    y, sr = sf.read(path, dtype="float32", always_2d=True)
    return y, sr


def test_three_windows_end_to_end(restorer, tmp_path):
    src = write(tmp_path / "in.wav", stereo(SECONDS, 44100), 44100)
    seen = []
    rep = restorer.restore_file(src, tmp_path / "out" / "out.wav", sampler="flash", steps=2,
                                progress=lambda p: seen.append((p.window, p.windows, p.step, p.steps)))
    out = tmp_path / "out" / "out.wav"
    assert out.is_file()
    info_in, info_out = sf.info(str(src)), sf.info(str(out))
    assert (info_out.frames, info_out.samplerate, info_out.channels) == (info_in.frames, 44100, 2)
    y, _ = restored(out)
    assert np.isfinite(y).all() and np.abs(y).max() > 0
    assert rep.windows == 3 and rep.channels_in == 2 and rep.channels_restored == 2
    assert rep.sample_rate_in == rep.sample_rate_out == 44100
    assert rep.seconds_audio == pytest.approx(SECONDS, abs=1e-3) and rep.seconds_wall > 0
    assert rep.sampler["name"] == "flash" and rep.sampler["steps"] == 2
    assert seen == [(w, 3, s, 2) for w in range(3) for s in range(2)]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["out.wav"]  # no temporary file left
    d = rep.to_dict()
    assert d["output"] == str(out) and "realtime_factor" in d


@pytest.mark.parametrize("sr, seconds", [(8000, 0.5), (44100, 0.7), (22050, 3.01), (48000, 5.5), (96000, 2.0), (16000, 6.13)])
def test_output_length_is_exact(restorer, tmp_path, sr, seconds):
    """Whatever the rate and length (one window, partial windows, resampling both ways)."""
    x = speechlike(seconds, sr)
    src = write(tmp_path / "in.wav", x, sr)
    restorer.restore_file(src, tmp_path / "out.wav", **FAST)
    y, rate = restored(tmp_path / "out.wav")
    assert rate == sr and y.shape == (len(x), 1) and np.isfinite(y).all()


def test_seed_gives_the_same_output(restorer, live_model, tmp_path):
    # the pro sampler draws fresh noise every step (churn), so the whole noise stream is covered
    src = write(tmp_path / "in.wav", speechlike(SECONDS, 16000), 16000, subtype="FLOAT")
    opts = {"sampler": "pro", "steps": 3}
    restorer.restore_file(src, tmp_path / "a.wav", seed=7, **opts)
    restorer.restore_file(src, tmp_path / "b.wav", seed=7, **opts)
    Restorer(live_model, window=WindowConfig(seconds=3.0, overlap=0.5)).restore_file(
        src, tmp_path / "c.wav", seed=7, **opts)
    restorer.restore_file(src, tmp_path / "d.wav", seed=8, **opts)
    a, b, c, d = (restored(tmp_path / f"{n}.wav")[0] for n in "abcd")
    assert sf.info(str(tmp_path / "a.wav")).subtype == "FLOAT"
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)  # a fresh Restorer too
    assert not np.allclose(a, d, atol=1e-4)
    # noise drawn a step ahead on threads (as the cuda plan does) is the same noise
    plan = replace(resolve_plan("cpu"), noise_threads=2)
    with Restorer(live_model, plan=plan, window=WindowConfig(seconds=3.0, overlap=0.5)) as threaded:
        threaded.restore_file(src, tmp_path / "e.wav", seed=7, **opts)
    np.testing.assert_array_equal(a, restored(tmp_path / "e.wav")[0])


def test_grid_offsets_restore_each_window_several_times_and_average(restorer, tmp_path):
    """`shifts` restores every window at that many offsets of the frame grid and averages them: the
    output moves (the copies differ), stays the input's length, is the same on every run, and the
    report records the setting; a single offset is the plain restoration."""
    src = write(tmp_path / "in.wav", speechlike(SECONDS, 16000), 16000)
    one = restorer.restore_file(src, tmp_path / "one.wav", **FAST)
    plain = restorer.restore_file(src, tmp_path / "plain.wav", shifts=1, **FAST)
    two = restorer.restore_file(src, tmp_path / "two.wav", shifts=2, **FAST)
    again = restorer.restore_file(src, tmp_path / "again.wav", shifts=2, **FAST)
    a, p, b, c = (restored(tmp_path / f"{n}.wav")[0] for n in ("one", "plain", "two", "again"))
    assert one.sampler["shifts"] == plain.sampler["shifts"] == 1 and two.sampler["shifts"] == again.sampler["shifts"] == 2
    np.testing.assert_array_equal(a, p)
    np.testing.assert_array_equal(b, c)
    assert a.shape == b.shape and not np.allclose(a, b, atol=1e-4)
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.9  # the same restoration, averaged over offsets


def test_channels_auto_identical_restores_once(restorer, tmp_path):
    src = write(tmp_path / "in.wav", stereo(SECONDS, 16000, identical=True), 16000)
    rep = restorer.restore_file(src, tmp_path / "out.wav", channels="auto", **FAST)
    y, _ = restored(tmp_path / "out.wav")
    assert rep.channels_restored == 1 and y.shape[1] == 2
    np.testing.assert_array_equal(y[:, 0], y[:, 1])


def test_channels_auto_different_restores_each(restorer, tmp_path):
    src = write(tmp_path / "in.wav", stereo(SECONDS, 16000), 16000)
    rep = restorer.restore_file(src, tmp_path / "out.wav", channels="auto", **FAST)
    y, _ = restored(tmp_path / "out.wav")
    assert rep.channels_restored == 2 and y.shape[1] == 2
    assert not np.allclose(y[:, 0], y[:, 1])


def test_channels_each(restorer, tmp_path):
    x = np.stack([speechlike(SECONDS, 16000, seed=s) for s in range(4)], axis=1)
    src = write(tmp_path / "in.wav", x, 16000)
    rep = restorer.restore_file(src, tmp_path / "out.flac", channels="each", **FAST)
    y, _ = restored(tmp_path / "out.flac")
    assert rep.channels_restored == 4 and y.shape == x.shape
    # identical channels are restored one by one too when asked for
    src = write(tmp_path / "dual.wav", stereo(SECONDS, 16000, identical=True), 16000)
    rep = restorer.restore_file(src, tmp_path / "dual_out.wav", channels="each", **FAST)
    assert rep.channels_restored == 2 and restored(tmp_path / "dual_out.wav")[0].shape[1] == 2


def test_channels_mix(restorer, tmp_path):
    src = write(tmp_path / "in.wav", stereo(SECONDS, 22050), 22050)
    rep = restorer.restore_file(src, tmp_path / "out.wav", channels="mix", **FAST)
    y, sr = restored(tmp_path / "out.wav")
    assert rep.channels_restored == 1 and y.shape == (int(SECONDS * 22050), 1) and sr == 22050


def test_bad_channels_and_rate_options(restorer, tmp_path):
    src = write(tmp_path / "in.wav", speechlike(1.0, 16000), 16000)
    with pytest.raises(UsageError, match="^channels must be one of auto, each, mix, got 'left'$"):
        restorer.restore_file(src, tmp_path / "out.wav", channels="left", **FAST)
    with pytest.raises(UsageError, match="^sample_rate must be 8000-192000 Hz"):
        restorer.restore_file(src, tmp_path / "out.wav", sample_rate=1000, **FAST)
    with pytest.raises(UsageError, match="^steps must be at least 1"):
        restorer.restore_file(src, tmp_path / "out.wav", sampler="flash", steps=0)
    for shifts, said in ((0, "at least 1, got 0"), (9, "1-8, got 9"), (2.0, "a whole number, got 2.0")):
        with pytest.raises(UsageError, match=f"^shifts must be {said}$"):
            restorer.restore_file(src, tmp_path / "out.wav", shifts=shifts, **FAST)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]


@pytest.mark.parametrize("rate_in, rate_out", [(16000, 48000), (44100, 22050), (8000, 8000)])
def test_sample_rate_option(restorer, tmp_path, rate_in, rate_out):
    src = write(tmp_path / "in.wav", stereo(2.0, rate_in), rate_in)
    rep = restorer.restore_file(src, tmp_path / "out.wav", sample_rate=rate_out, **FAST)
    y, sr = restored(tmp_path / "out.wav")
    assert sr == rate_out == rep.sample_rate_out and y.shape == (2 * rate_out, 2)


def test_transcript_sources(restorer, tmp_path):
    text = "the quick brown fox jumps over the lazy dog"
    src = write(tmp_path / "in.wav", speechlike(SECONDS, 16000), 16000)
    rep_none = restorer.restore_file(src, tmp_path / "none.wav", **FAST)
    rep_arg = restorer.restore_file(src, tmp_path / "arg.wav", transcript=text, **FAST)
    (tmp_path / "words.txt").write_text(text + "\n")
    rep_file = restorer.restore_file(src, tmp_path / "file.wav", transcript=str(tmp_path / "words.txt"), **FAST)
    (tmp_path / "in.txt").write_text(text + "\n")
    rep_side = restorer.restore_file(src, tmp_path / "side.wav", **FAST)
    rep_over = restorer.restore_file(src, tmp_path / "over.wav", transcript="something else entirely", **FAST)
    assert [r.transcript for r in (rep_none, rep_arg, rep_file, rep_side, rep_over)] == \
        ["none", "given", "given", "sidecar", "given"]
    none, arg, file, side = (restored(tmp_path / f"{n}.wav")[0] for n in ("none", "arg", "file", "side"))
    np.testing.assert_array_equal(arg, side)  # the same text, whichever way it came
    np.testing.assert_array_equal(arg, file)
    assert not np.array_equal(arg, none)      # the transcript reaches the model
    with pytest.raises(UsageError, match="no such transcript file"):
        restorer.restore_file(src, tmp_path / "x.wav", transcript=str(tmp_path / "mistyped.txt"), **FAST)


@pytest.mark.parametrize("ext, fmt", [(".wav", "WAV"), (".flac", "FLAC"), (".ogg", "OGG")]
                         + ([(".mp3", "MP3")] if ".mp3" in audio.WRITE_FORMATS else []))
def test_output_format_from_extension(restorer, tmp_path, ext, fmt):
    x = speechlike(2.0, 22050)
    src = write(tmp_path / "in.wav", x, 22050)
    restorer.restore_file(src, tmp_path / f"out{ext}", **FAST)
    info = sf.info(str(tmp_path / f"out{ext}"))
    assert info.format == fmt and info.samplerate == 22050 and info.frames == len(x)


def test_24_bit_in_24_bit_out(restorer, tmp_path):
    src = write(tmp_path / "in.wav", speechlike(1.0, 48000), 48000, subtype="PCM_24")
    restorer.restore_file(src, tmp_path / "out.flac", **FAST)
    restorer.restore_file(src, tmp_path / "out.wav", **FAST)
    assert sf.info(str(tmp_path / "out.flac")).subtype == "PCM_24"
    assert sf.info(str(tmp_path / "out.wav")).subtype == "PCM_24"


def test_failure_mid_file_leaves_existing_output(restorer, tmp_path, monkeypatch):
    src = write(tmp_path / "in.wav", speechlike(SECONDS, 16000), 16000)
    out = write(tmp_path / "out.wav", speechlike(1.0, 16000, seed=3), 16000)
    before = out.read_bytes()
    calls = []
    original = Restorer._sample

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("crash in window 2")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Restorer, "_sample", failing)
    with pytest.raises(RuntimeError, match="crash"):
        restorer.restore_file(src, out, overwrite=True, **FAST)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav", "out.wav"]


def test_batching_windows_of_several_files_does_not_change_the_audio(restorer, tmp_path):
    """Windows of several files share one sampler loop; each keeps its own seed."""
    srcs = [write(tmp_path / f"in{i}.wav", speechlike(s, 16000, seed=i), 16000) for i, s in enumerate((2.0, 7.5, 4.0))]
    one = [(s, tmp_path / f"one_{s.name}") for s in srcs]
    many = [(s, tmp_path / f"many_{s.name}") for s in srcs]
    opts = dict(sampler="flash", steps=2, seed=3)
    got_one = list(restorer.restore_files(one, batch_rows=1, **opts))
    got_many = list(restorer.restore_files(many, batch_rows=4, **opts))
    # the short file waits for its shared window to close: it comes out after the long ones
    assert [r[0] for r in got_one] == [r[0] for r in got_many] == srcs[1:] + srcs[:1]
    assert all(not isinstance(r[2], Exception) for r in got_one + got_many)
    for (_, a), (_, b) in zip(one, many):
        x, _ = sf.read(a)
        y, _ = sf.read(b)
        assert x.shape == y.shape and np.allclose(x, y, atol=1e-4)


def test_a_bad_file_in_a_batch_is_reported_and_the_others_restored(restorer, tmp_path):
    good = write(tmp_path / "good.wav", speechlike(2.0, 16000), 16000)
    bad = tmp_path / "bad.wav"
    bad.write_text("not audio")
    results = list(restorer.restore_files([(bad, tmp_path / "o1.wav"), (good, tmp_path / "o2.wav")],
                                          batch_rows=4, sampler="flash", steps=1))
    kinds = {r[0].name: type(r[2]).__name__ for r in results}
    assert kinds == {"bad.wav": "InputError", "good.wav": "FileReport"}
    assert (tmp_path / "o2.wav").exists() and not (tmp_path / "o1.wav").exists()


def test_a_file_shorter_than_a_window_gets_the_full_window(restorer, tmp_path, monkeypatch):
    """The model is trained on full windows (short content zero-padded); a shorter window costs quality
    (PESQ -0.02 on the dev set), so every file, batched or not, is restored in the full window."""
    from restore.pipeline import job as job_mod
    seen = []
    original = job_mod.FileJob.windows

    def spy(self):
        for w in original(self):
            seen.append((w.wave.shape[-1], [(p.offset, p.length) for p in w.parts]))
            yield w
    monkeypatch.setattr(job_mod.FileJob, "windows", spy)
    src = write(tmp_path / "in.wav", speechlike(1.3, 16000), 16000)
    restorer.restore_file(src, tmp_path / "o.wav", sampler="flash", steps=1)
    assert seen == [(restorer.geometry.length, [(0, 20800)])]  # 1.3 s in a 3 s window, the rest zero
    seen.clear()
    list(restorer.restore_files([(src, tmp_path / "o2.wav")], batch_rows=2, sampler="flash", steps=1))
    assert seen == [(restorer.geometry.length, [(0, 20800)])]
    assert sf.info(str(tmp_path / "o.wav")).frames == sf.info(str(src)).frames
    np.testing.assert_allclose(sf.read(tmp_path / "o.wav")[0], sf.read(tmp_path / "o2.wav")[0], atol=1e-4)


def band_residual(a: np.ndarray, b: np.ndarray) -> float:
    """How far a is from b with one real gain per frequency bin (the codec's STFT, over the frames):
    the relative energy of a - g b for the best such gains g."""
    from restore.codec import STFTCodec
    from restore.config import CodecConfig

    codec = STFTCodec(CodecConfig(scale=3.0))
    n = len(a) // 256 * 256
    A, B = (codec.spectrum(codec.encode(torch.from_numpy(x[:n].copy())[None]))[0] for x in (a, b))
    g = (A * B.conj()).real.sum(0) / B.abs().square().sum(0).clamp_min(1e-20)
    return float((A - g * B).abs().square().sum() / A.abs().square().sum())


def test_strength_at_one_step_scales_the_networks_part_and_keeps_the_level(restorer, live_model, tmp_path):
    """At one step strength s gives what a model whose output layer is scaled by s gives (the raw output
    is the network's part of the velocity, over the observation skip's linear estimate), at the level of
    the full-strength estimate in each frequency bin: one window here, so one gain per bin over the file."""
    src = write(tmp_path / "in.wav", speechlike(2.5, 16000), 16000, subtype="FLOAT")
    files = weights.load(live_model)
    state = {k: v * 0.5 if k.startswith("out.") else v for k, v in files.state.items()}
    weights.save(tmp_path / "half", files.model, files.codec, state, dtype=torch.float32)
    half = Restorer(tmp_path / "half", window=WindowConfig(seconds=3.0, overlap=0.5))
    # level "model": levelled to the input, all three files would have the input's RMS and the level
    # comparison below would compare rounding
    for opts in ({"sampler": "pro", "steps": 1, "seed": 2, "level": "model"}, {**FAST, "level": "model"}):
        restorer.restore_file(src, tmp_path / "a.wav", strength=0.5, overwrite=True, **opts)
        half.restore_file(src, tmp_path / "b.wav", overwrite=True, **opts)
        restorer.restore_file(src, tmp_path / "c.wav", overwrite=True, **opts)
        a, b, c = (restored(tmp_path / f"{n}.wav")[0].ravel() for n in "abc")
        # a is b with one gain per frequency bin (the strength's per-bin level), within decoding's rounding
        assert band_residual(a, b) < 1e-3
        assert band_residual(a, c) > 10 * band_residual(a, b)  # and it does change the output
    rms = lambda x: float(np.sqrt(np.mean(np.square(x))))  # noqa: E731
    # at one step the strength-1 output is the full estimate: a takes its level (within what decoding
    # and cropping a window of the model's inconsistent latents move), b does not
    assert abs(rms(a) / rms(c) - 1) < abs(rms(b) / rms(c) - 1)
    with pytest.raises(UsageError, match="between 0 and 2"):
        restorer.restore_file(src, tmp_path / "d.wav", strength=3.0, **FAST)


def test_strength_needs_the_observation_skip(tmp_path):
    from restore.config import CodecConfig, ModelConfig
    from restore.model.dit import DiT
    from tests.conftest import TINY_MODEL

    cfg = ModelConfig.from_dict({**TINY_MODEL, "precondition": "none"})
    weights.save(tmp_path / "m", cfg, CodecConfig(scale=3.0), DiT(cfg, CodecConfig(scale=3.0)).state_dict(),
                 dtype=torch.float32)
    src = write(tmp_path / "in.wav", speechlike(1.0, 16000), 16000)
    with pytest.raises(UsageError, match="observation skip"):
        Restorer(tmp_path / "m").restore_file(src, tmp_path / "out.wav", strength=0.5, **FAST)


def test_the_restored_file_is_as_loud_as_the_input_unless_asked_otherwise(restorer, tmp_path):
    src = write(tmp_path / "in.wav", speechlike(SECONDS, 16000) * 0.3, 16000, subtype="FLOAT")
    rep = restorer.restore_file(src, tmp_path / "a.wav", **FAST)
    raw = restorer.restore_file(src, tmp_path / "b.wav", level="model", **FAST)
    x, a, b = (sf.read(str(p), dtype="float32", always_2d=True)[0] for p in (src, tmp_path / "a.wav", tmp_path / "b.wav"))
    rms = lambda y: (lambda p, n: (p / n) ** 0.5)(*audio.active_power(y, 16000))  # noqa: E731
    assert rms(a) == pytest.approx(rms(x), rel=0.01) and not rep.level_limited
    assert rep.level == "input" and raw.level == "model" and raw.level_gain_db is None
    assert np.allclose(a, b * 10 ** (rep.level_gain_db / 20), rtol=2e-3, atol=1e-6)  # one gain (reported to 0.01 dB)
    with pytest.raises(UsageError, match="^level must be one of input, model"):
        restorer.restore_file(src, tmp_path / "c.wav", level="loud", **FAST)


# ---- the Python API is as safe as the command line (issue 48) ----

def test_the_api_keeps_an_existing_output_unless_asked(restorer, tmp_path):
    src = write(tmp_path / "in.wav", speechlike(1.0, 16000), 16000)
    out = write(tmp_path / "out.flac", speechlike(1.0, 16000, seed=3), 16000)
    before = out.read_bytes()
    with pytest.raises(UsageError, match=r"out.flac: already exists \(use overwrite=True to replace it\)$"):
        restorer.restore_file(src, out, **FAST)
    ((_, _, error),) = restorer.restore_files([(src, out)], **FAST)
    assert isinstance(error, UsageError) and out.read_bytes() == before
    restorer.restore_file(src, out, overwrite=True, **FAST)
    assert out.read_bytes() != before
    import restore
    with pytest.raises(UsageError, match="already exists"):
        restore.restore_file(src, out, model=restorer.model_dir, **FAST)


@pytest.mark.parametrize("call, problem", [
    (lambda r, src, out: r.restore_file(src, out, seed="abc"), "seed must be a whole number, got 'abc'"),
    (lambda r, src, out: r.restore_file(src, out, steps=2.5), "steps must be a whole number, got 2.5"),
    (lambda r, src, out: r.restore_file(src, out, strength="x"), "strength must be a number, got 'x'"),
    (lambda r, src, out: r.restore_file(src, out, guidance=float("nan")), "guidance must be a number, got nan"),
    (lambda r, src, out: r.restore_file(src, out, transcript=5), "transcript must be text or the path of a .txt file"),
    (lambda r, src, out: r.restore_file(src, out, keep_input=[1]), "keep_input takes 'off' or a level in dB"),
    (lambda r, src, out: r.restore_file(src, out, bogus=1), "unknown option(s) bogus; choose from sampler"),
    (lambda r, src, out: r.restore_file(src, out, "flash"), "options must be a RestoreOptions, got 'flash'"),
    (lambda r, src, out: r.restore_file(None, out), "input must be a file or folder path (str or pathlib.Path), got None"),
    (lambda r, src, out: r.restore_file(src, 3), "output must be a file or folder path (str or pathlib.Path), got 3"),
    (lambda r, src, out: list(r.restore_files([(src, out)], batch_rows=0)), "batch_rows must be at least 1, got 0"),
    (lambda r, src, out: r.restore_file(src, out, steps=1, guidance=2.0), "guidance has no effect here"),
    (lambda r, src, out: Restorer(r.model_dir, mlp_share="x"), "mlp_share must be a share between 0 and 1"),
    (lambda r, src, out: Restorer(r.model_dir, device="tpu"), "device must be auto, cpu, cuda or cuda:N"),
    (lambda r, src, out: Restorer(r.model_dir, plan="split", mlp_share=5), "mlp_share must be a share between 0 and 1"),
    (lambda r, src, out: Restorer(r.model_dir, plan="cpu", compile="cuda-graphs"), "compile='cuda-graphs' needs"),
    (lambda r, src, out: Restorer(None, plan="cuda", device="cpu"), "plan='cuda' needs a CUDA device"),
    (lambda r, src, out: Restorer(5), "model must be a file or folder path"),
])
def test_the_api_refuses_bad_arguments_in_one_sentence_of_its_own_words(restorer, tmp_path, call, problem):
    src = write(tmp_path / "in.wav", speechlike(1.0, 16000), 16000)
    with pytest.raises(UsageError) as e:
        call(restorer, src, tmp_path / "out.wav")
    assert problem in str(e.value) and "--" not in str(e.value) and "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]


def test_the_command_line_gets_the_same_errors_in_its_flags():
    from restore.errors import command_line_words
    from restore.options import RestoreOptions
    with command_line_words(), pytest.raises(UsageError, match="^--keep-input must be 'off' or between"):
        RestoreOptions(keep_input=99)
    with pytest.raises(UsageError, match="^keep_input must be 'off' or between"):
        RestoreOptions(keep_input=99)
    with command_line_words(), pytest.raises(ValueError, match=r"^--compile cuda-graphs needs the cuda plan$"):
        resolve_plan("cpu", "cpu", compile="cuda-graphs")


def test_the_module_functions_take_the_restorers_keywords(live_model, tmp_path):
    import restore
    src = write(tmp_path / "in.wav", speechlike(1.0, 16000), 16000)
    with pytest.raises(UsageError, match="^unknown option"):
        restore.restore_file(src, tmp_path / "o.wav", model=live_model, mlp_shares=0.5)
    with pytest.raises(UsageError, match="^unknown keyword"):
        restore.load_model(live_model, threads=3)
    rep = restore.restore_file(src, tmp_path / "o.wav", model=live_model, plan="cpu", compile="off", **FAST)
    assert rep.seconds_audio == 1.0


# ---- short files packed into shared windows (issue 50) ----

def spy_windows(monkeypatch):
    """The parts of every window the sampler sees: [(file name, offset, length), ...] per window."""
    seen = []
    original = Restorer._sample

    def spy(self, batch, *args, **kwargs):
        seen.extend([(p.job.input.name, p.offset, p.length) for p in w.parts] for w in batch)
        return original(self, batch, *args, **kwargs)
    monkeypatch.setattr(Restorer, "_sample", spy)
    return seen


def test_short_files_share_windows_and_come_back_as_they_went_in(restorer, tmp_path, monkeypatch):
    """Each file of a shared window gets back its own length, rate, channels and level; files of
    different rows (stereo) share windows only with each other; a long file keeps windows of its own."""
    files = {"m16.wav": (speechlike(1.0, 16000, seed=1) * 0.2, 16000),
             "m44.wav": (speechlike(0.7, 44100, seed=2) * 3.0, 44100),       # full band; loud
             "s48.flac": (stereo(0.9, 48000), 48000),                        # stereo, full band
             "s22.wav": (stereo(0.8, 22050), 22050),
             "m8.wav": (speechlike(0.6, 8000, seed=3), 8000),
             "dual.wav": (stereo(0.8, 16000, identical=True), 16000),        # restored once: packs with mono
             "long.wav": (speechlike(SECONDS, 16000, seed=4), 16000)}
    pairs = [(write(tmp_path / "in" / name, x, sr), tmp_path / "out" / name) for name, (x, sr) in files.items()]
    seen = spy_windows(monkeypatch)
    results = {src.name: rep for src, _, rep in restorer.restore_files(pairs, **FAST)}
    assert all(not isinstance(r, Exception) for r in results.values()), results
    # each at the model rate, 0.5 s after the one before, on the codec's 256-sample grid
    assert [("m16.wav", 0, 16000), ("m44.wav", 24064, 11200)] in seen
    assert [("m8.wav", 0, 9600), ("dual.wav", 17664, 12800)] in seen
    assert [("s48.flac", 0, 14400), ("s22.wav", 22528, 12800)] in seen
    assert sum(1 for w in seen if w[0][0] == "long.wav") == 3
    for src, out in pairs:
        x, sr = sf.read(src, dtype="float32", always_2d=True)
        y, rate = sf.read(out, dtype="float32", always_2d=True)
        assert (rate, y.shape) == (sr, x.shape) and np.isfinite(y).all() and np.abs(y).max() > 0, src.name
        rep = results[src.name]
        assert rep.windows == (3 if src.name == "long.wav" else 1)
        rms = lambda y: (lambda p, n: (p / n) ** 0.5)(*audio.active_power(y, sr))  # noqa: E731
        if not rep.level_limited:  # levelled to its own input, whatever its neighbours' levels
            assert rms(y) == pytest.approx(rms(x), rel=0.01), src.name
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(files)  # no temporary file left


@pytest.mark.parametrize("shifts", [1, 2, 3])
def test_shared_windows_are_cut_back_to_the_sample(restorer, tmp_path, monkeypatch, shifts):
    """With the sampler's result replaced by the input's own latents (the codec inverts exactly), every
    file packed into a shared window comes back as it went in, sample for sample; also from windows
    restored at several offsets of the frame grid (each copy moved back by its own)."""
    monkeypatch.setattr(Restorer, "_sample", lambda self, batch, obs, *a, **k: obs)
    seen = spy_windows(monkeypatch)
    rng = np.random.default_rng(0)
    inputs = {f"f{i}.wav": rng.uniform(-0.5, 0.5, (int(s * 16000), c)).astype(np.float32)
              for i, (s, c) in enumerate([(0.9, 1), (0.61, 1), (1.234, 1), (0.5, 1), (1.1, 2), (0.77, 2)])}
    pairs = [(write(tmp_path / name, x, 16000, subtype="FLOAT"), tmp_path / "out" / name) for name, x in inputs.items()]
    list(restorer.restore_files(pairs, level="model", shifts=shifts, **FAST))
    assert max(len(w) for w in seen) >= 2 and len(seen) < len(inputs)
    for (src, out), x in zip(pairs, inputs.values()):
        y, _ = sf.read(out, dtype="float32", always_2d=True)
        assert y.shape == x.shape and np.abs(y - x).max() < 1e-5, src.name


def test_a_single_short_file_is_restored_as_before_packing(restorer, tmp_path, monkeypatch):
    """A single-file run of a short file (here stereo 44.1 kHz, with strength, keeping the input and a
    stochastic sampler) gives what it gave before files were packed: samples recorded from that code (with
    the per-bin strength level; the spectral balance, which came after, left out)."""
    from restore.pipeline import post

    monkeypatch.setattr(post, "match_balance", lambda codec, obs, est, spans=None: est)
    x = np.stack([speechlike(1.3, 44100, seed=4), 0.5 * speechlike(1.3, 44100, seed=5)], 1)
    src = write(tmp_path / "in.wav", x, 44100, subtype="FLOAT")
    restorer.restore_file(src, tmp_path / "o.wav", sampler="pro", steps=2, seed=7, strength=0.5, keep_input=6.0)
    y, _ = sf.read(tmp_path / "o.wav", dtype="float32")
    assert y.shape == x.shape
    want = [[0.000652, -0.00176], [0.003959, -0.000296], [0.008554, 0.005422], [0.004546, 0.008493]]
    np.testing.assert_allclose(y[[100, 9000, 30000, 57000]], want, atol=2e-6)
    assert float(np.sqrt(np.mean(y ** 2))) == pytest.approx(0.0306916, rel=1e-5)


@pytest.mark.parametrize("shifts", [1, 2])
def test_a_file_sharing_a_window_is_restored_apart_from_its_neighbours(live_model, tmp_path, monkeypatch, shifts):
    """The model must not carry one file's damage or voice into another: with the neighbour in the
    middle of a shared window replaced by loud noise, the files either side of it come out the same, to
    float rounding, also where each window is restored at two offsets of the frame grid. (The semantic
    features are made 30x louder than the tiny model's own: leaks through them, the convolutions' reach
    or the GroupNorms' statistics, then move the output 1e-6 to 2e-5.)"""
    files = weights.load(live_model)
    state = {k: v * 30 if k.startswith("encoder.out.") else v for k, v in files.state.items()}
    weights.save(tmp_path / "loud", files.model, files.codec, state, dtype=torch.float32)
    restorer = Restorer(tmp_path / "loud", window=WindowConfig(seconds=3.0, overlap=0.5))
    seen = spy_windows(monkeypatch)
    names = ["a.wav", "b.wav", "c.wav"]
    for name, seed in zip(names, (1, 2, 3)):
        write(tmp_path / "in" / name, speechlike(0.5, 16000, seed=seed), 16000, subtype="FLOAT")
    opts = dict(sampler="pro", steps=2, seed=4, strength=0.5, keep_input=6.0, shifts=shifts)
    pairs = lambda out: [(tmp_path / "in" / n, tmp_path / out / n) for n in names]  # noqa: E731
    list(restorer.restore_files(pairs("one"), **opts))
    noise = np.random.default_rng(5).uniform(-0.9, 0.9, 8000).astype(np.float32)
    write(tmp_path / "in" / "b.wav", noise, 16000, subtype="FLOAT")
    list(restorer.restore_files(pairs("two"), **opts))
    assert seen[0] == seen[1] == [("a.wav", 0, 8000), ("b.wav", 16128, 8000), ("c.wav", 32256, 8000)]
    for name in names:
        one, two = (sf.read(tmp_path / out / name, dtype="float32")[0] for out in ("one", "two"))
        if name == "b.wav":
            assert not np.allclose(one, two, atol=1e-3)
        else:
            np.testing.assert_allclose(one, two, rtol=0, atol=3e-7, err_msg=name)


# ---- the files' finishing work on a thread of its own (issue 50) ----

class InlineWriter:
    """restorer._Writer as it was before the thread: each batch's files finished in the caller's thread
    where the batch is handed over."""

    def __init__(self, finish, depth=2):
        self.finish = finish

    def hand(self, item):
        yield from self.finish(item)

    def drain(self):
        return iter(())

    def stop(self):
        pass


def writer_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith(("restore-read", "restore-write"))]


def a_folder(folder):
    """Short files of several rates and channels (packed), a long one, one that cannot be read; the
    outputs as (input, output in `out`) pairs."""
    files = {"a.wav": (speechlike(1.0, 16000, seed=1), 16000), "b.flac": (stereo(0.9, 48000), 48000),
             "c.wav": (speechlike(0.7, 44100, seed=2) * 3.0, 44100),
             "d.wav": (speechlike(SECONDS, 16000, seed=4), 16000),
             "e.flac": (stereo(0.8, 22050), 22050), "f.wav": (speechlike(1.2, 8000, seed=3), 8000),
             "g.wav": (speechlike(0.6, 16000, seed=5), 16000)}
    pairs = [(write(folder / name, x, sr), name) for name, (x, sr) in files.items()]
    (folder / "bad.wav").write_text("not audio")
    pairs.insert(3, (folder / "bad.wav", "bad.wav"))
    return lambda out: [(src, out / name) for src, name in pairs]  # noqa: E731


def test_the_writer_thread_gives_what_finishing_in_the_callers_thread_gives(restorer, tmp_path, monkeypatch):
    """The same files, byte for byte, and the same results in the same order, reports and the engine's
    warnings included, as finishing each batch's files in the caller's thread."""
    from restore.pipeline import restorer as restorer_mod

    pairs = a_folder(tmp_path / "in")
    original = Restorer._sample

    def warns(self, batch, *args, **kwargs):  # an engine warning with every batch
        self.engine.warnings.append(f"batch of {'+'.join(p.job.input.name for w in batch for p in w.parts)}")
        return original(self, batch, *args, **kwargs)
    monkeypatch.setattr(Restorer, "_sample", warns)
    before = len(restorer.engine.warnings)

    def run(out):
        return [(src.name, rep) for src, _, rep in restorer.restore_files(pairs(out), batch_rows=2, **FAST)]
    try:
        threaded = run(tmp_path / "threaded")
        with monkeypatch.context() as m:
            m.setattr(restorer_mod, "_Writer", InlineWriter)
            inline = run(tmp_path / "inline")
    finally:
        del restorer.engine.warnings[before:]
    assert [(n, type(r).__name__) for n, r in threaded] == [(n, type(r).__name__) for n, r in inline]
    assert sum(isinstance(r, Exception) for _, r in threaded) == 1
    mine = lambda r: str(r) if isinstance(r, Exception) else {  # noqa: E731
        k: v for k, v in r.to_dict().items() if k not in ("output", "seconds_wall", "realtime_factor")}
    assert [mine(r) for _, r in threaded] == [mine(r) for _, r in inline]
    # as before the thread: a batch's files are finished after the next batch is sampled, and the
    # warnings so far go with the first file to finish
    batches = ["d.wav+d.wav", "d.wav+a.wav+c.wav", "f.wav+g.wav+b.flac+e.flac"]
    assert {n: r.warnings for n, r in threaded if not isinstance(r, Exception)} == {
        "d.wav": [f"batch of {b}" for b in batches], "b.flac": [], "a.wav": [], "c.wav": [], "e.flac": [],
        "f.wav": [], "g.wav": []}
    names = sorted(p.name for p in (tmp_path / "inline").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "threaded").iterdir()) and len(names) == 7
    for name in names:
        assert (tmp_path / "threaded" / name).read_bytes() == (tmp_path / "inline" / name).read_bytes(), name
    assert writer_threads() == []


def test_reading_ahead_on_threads_gives_what_one_reader_gives(restorer, live_model, tmp_path):
    """Short files opened and read on a pool (as the cuda plan does): the same files, byte for byte, and
    the same results in the same order, a long file read in order between them; stopping early leaves no
    temporary file and no reading thread."""
    folder = a_folder(tmp_path / "in")
    more = [(write(tmp_path / "in" / f"s{k}.wav", speechlike(1.3, 16000, seed=10 + k), 16000), f"s{k}.wav")
            for k in range(8)]
    (tmp_path / "in" / "late.wav").write_text("not audio either")
    more.insert(6, (tmp_path / "in" / "late.wav", "late.wav"))
    pairs = lambda out: folder(out) + [(src, out / name) for src, name in more]  # noqa: E731
    plan = replace(resolve_plan("cpu"), read_threads=3)
    mine = lambda r: str(r) if isinstance(r, Exception) else {  # noqa: E731
        k: v for k, v in r.to_dict().items() if k not in ("output", "seconds_wall", "realtime_factor")}
    with Restorer(live_model, plan=plan, window=WindowConfig(seconds=3.0, overlap=0.5)) as threaded:
        assert threaded.plan.read_threads == 3
        ahead = [(src.name, mine(rep)) for src, _, rep in
                 threaded.restore_files(pairs(tmp_path / "ahead"), batch_rows=2, **FAST)]
        one = [(src.name, mine(rep)) for src, _, rep in
               restorer.restore_files(pairs(tmp_path / "one"), batch_rows=2, **FAST)]
        # the files in the same order; a file that cannot be opened is said as soon as it is found
        assert dict(ahead) == dict(one) and len(one) == 17
        assert [n for n, r in ahead if isinstance(r, dict)] == [n for n, r in one if isinstance(r, dict)]
        names = sorted(p.name for p in (tmp_path / "one").iterdir())
        assert names == sorted(p.name for p in (tmp_path / "ahead").iterdir()) and len(names) == 15
        for name in names:
            assert (tmp_path / "ahead" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
        assert writer_threads() == []
        results = threaded.restore_files(pairs(tmp_path / "stopped"), **FAST)
        next(results)
        results.close()
        assert writer_threads() == []
        assert not [p.name for p in (tmp_path / "stopped").iterdir() if p.name.startswith(".")]


def test_a_file_that_fails_to_write_is_reported_and_the_others_finish(restorer, tmp_path, monkeypatch):
    """A write that fails for the first file of a shared window (a.wav, with c.wav): that file is
    reported, the others are written. A caller that stops at the failure gets nothing written after it."""
    pairs = a_folder(tmp_path / "in")
    write_ = sf.SoundFile.write

    def failing(self, data):
        if os.path.basename(self.name).startswith(".a.wav."):
            raise sf.LibsndfileError(2)
        return write_(self, data)
    monkeypatch.setattr(sf.SoundFile, "write", failing)
    out = tmp_path / "out"
    results = {src.name: rep for src, _, rep in restorer.restore_files(pairs(out), batch_rows=2, **FAST)}
    assert str(results["a.wav"]) == f"{out / 'a.wav'}: writing failed (System error)"
    assert sorted(n for n, r in results.items() if isinstance(r, Exception)) == ["a.wav", "bad.wav"]
    assert sorted(p.name for p in out.iterdir()) == ["b.flac", "c.wav", "d.wav", "e.flac", "f.wav", "g.wav"]
    # stopping at it: the file after it in its window is dropped, no temporary file left
    out = tmp_path / "stopped"
    results = restorer.restore_files(pairs(out), batch_rows=2, **FAST)
    taken = []
    for src, _, rep in results:
        taken.append(src.name)
        if isinstance(rep, Exception) and src.name == "a.wav":
            results.close()
            break
    assert taken == ["bad.wav", "d.wav", "a.wav"]
    assert sorted(p.name for p in out.iterdir()) == ["d.wav"]
    assert writer_threads() == []


def test_an_error_in_the_writer_is_raised_in_the_caller(restorer, tmp_path, monkeypatch):
    """An unexpected error while finishing a file comes out of the iterator where that file's result
    would have; the thread is gone and no temporary file is left."""
    from restore.pipeline.job import FileJob

    pairs = a_folder(tmp_path / "in")
    original = FileJob.finish

    def broken(self, warnings):
        if self.input.name == "c.wav":
            raise ZeroDivisionError("a bug")
        return original(self, warnings)
    monkeypatch.setattr(FileJob, "finish", broken)
    out = tmp_path / "out"
    taken = []
    with pytest.raises(ZeroDivisionError, match="a bug"):
        for src, _, _ in restorer.restore_files(pairs(out), **FAST):
            taken.append(src.name)
    assert taken == ["bad.wav", "d.wav", "a.wav"]
    assert writer_threads() == [] and not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_an_error_while_restoring_comes_after_the_files_restored_before_it(restorer, tmp_path, monkeypatch):
    """As before the thread: the files whose windows were all restored are written and yielded, then
    the error is raised (a Ctrl-C's report lists them)."""
    pairs = a_folder(tmp_path / "in")
    original, calls = Restorer._sample, []

    def crash(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # windows: d, d, d, a+c, b+e: d's last is decoded and handed over after a+c's
            raise RuntimeError("crash")
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Restorer, "_sample", crash)
    taken = []
    with pytest.raises(RuntimeError, match="crash"):
        for src, _, rep in restorer.restore_files(pairs(tmp_path / "out"), **FAST):
            taken.append((src.name, type(rep).__name__))
    assert taken == [("bad.wav", "InputError"), ("d.wav", "FileReport")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["d.wav"] and writer_threads() == []


def test_closing_early_stops_the_threads_and_leaves_complete_files(restorer, tmp_path):
    """Closing the iterator stops the reading and writing threads; the outputs there are complete."""
    pairs = a_folder(tmp_path / "in")
    list(restorer.restore_files(pairs(tmp_path / "all"), **FAST))
    results = restorer.restore_files(pairs(tmp_path / "out"), **FAST)
    assert [next(results)[0].name for _ in range(2)] == ["bad.wav", "d.wav"]
    assert "restore-write" in writer_threads()
    results.close()
    assert writer_threads() == []
    left = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "d.wav" in left and len(left) < 7 and not [n for n in left if n.startswith(".")]
    for name in left:  # whatever is there is complete
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "all" / name).read_bytes(), name


def test_a_bridge_model_starts_from_the_observation(live_model, tmp_path):
    """A model whose flow starts from the observation (ModelConfig.source) samples from the observation's
    latents plus source_sigma of noise: with a tiny sigma the seed hardly matters, where a model of the
    same weights that starts from noise gives another restoration for each seed. Guided, stochastic
    steps, so that every step's re-noising is on the bridge too."""
    src = write(tmp_path / "in.wav", speechlike(2.5, 16000), 16000, subtype="FLOAT")
    files = weights.load(live_model)
    outs = {}
    for name, source in (("noise", {}), ("bridge", {"source": "observation", "source_sigma": 1e-4})):
        model = ModelConfig.from_dict({**files.model.to_dict(), **source})
        weights.save(tmp_path / name, model, files.codec, files.state, dtype=torch.float32)
        r = Restorer(tmp_path / name, window=WindowConfig(seconds=3.0, overlap=0.5))
        for seed in (1, 2):
            r.restore_file(src, tmp_path / f"{name}{seed}.wav", sampler="pro", steps=3, seed=seed)
            outs[name, seed] = restored(tmp_path / f"{name}{seed}.wav")[0].ravel()
        assert np.isfinite(outs[name, 1]).all() and np.abs(outs[name, 1]).max() > 0
    def rel(a, b):
        return float(np.square(a - b).sum() / np.square(b).sum())
    assert rel(outs["bridge", 1], outs["bridge", 2]) < 1e-6
    assert rel(outs["noise", 1], outs["noise", 2]) > 1e-3
