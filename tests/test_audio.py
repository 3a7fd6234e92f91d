"""restore.audio: probing and validating inputs, scanning, reading, writing (atomically), resampling."""

import os

import numpy as np
import pytest
import soundfile as sf
import soxr

from restore import audio
from restore.errors import InputError, UsageError
from tests.conftest import leftovers, tone

RATES = [8000, 22050, 44100, 48000, 96000, 192000]
CHANNELS = [1, 2, 4]
FORMATS = [".wav", ".flac", ".ogg"] + ([".mp3"] if ".mp3" in audio.WRITE_FORMATS else [])
MP3_RATES = {8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000}


def mp3_writable(sr, channels):
    return sr in MP3_RATES and channels <= 2


# ---- write, probe, read over formats, rates and channel counts ----

@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("sr", RATES)
@pytest.mark.parametrize("channels", CHANNELS)
def test_write_probe_read_round_trip(tmp_path, ext, sr, channels):
    x = tone(0.6, sr, channels)
    path = tmp_path / f"x{ext}"
    if ext == ".mp3" and not mp3_writable(sr, channels):
        with pytest.raises(InputError, match=str(path)) as e:  # a clear failure, nothing left behind
            audio.write(path, x, sr)
        assert ".part" not in str(e.value)
        assert not path.exists() and leftovers(tmp_path) == []
        return
    audio.write(path, x, sr)
    assert leftovers(tmp_path) == []
    info = audio.probe(path)
    assert (info.sample_rate, info.channels) == (sr, channels)
    assert info.frames == len(x)
    assert info.duration == pytest.approx(0.6, abs=1e-4)
    y, rate = audio.read(path)
    assert rate == sr and y.shape == x.shape and y.dtype == np.float32
    if ext in (".wav", ".flac"):  # lossless, 16-bit
        np.testing.assert_allclose(y, x, atol=1.0 / 32768 + 1e-6)
    else:                         # lossy: same level, correlated
        assert np.isfinite(y).all()
        mid = slice(len(x) // 4, 3 * len(x) // 4)
        assert np.corrcoef(x[mid, 0], y[mid, 0])[0, 1] > 0.9


@pytest.mark.parametrize("sr", RATES)
def test_blocks_and_scan_stream_the_whole_file(tmp_path, sr):
    x = tone(1.3, sr, 2)
    path = tmp_path / "x.flac"
    sf.write(path, x, sr, subtype="PCM_24")
    info = audio.probe(path)
    got = list(audio.blocks(info, seconds=0.25))
    assert sum(len(b) for b in got) == len(x)
    assert all(b.dtype == np.float32 and b.shape[1] == 2 for b in got)
    np.testing.assert_allclose(np.concatenate(got), x, atol=1e-6)
    levels = audio.scan(info)
    assert levels.peak == pytest.approx(np.abs(x).max(), rel=1e-4)
    assert levels.rms == pytest.approx(np.sqrt(np.mean(np.square(x, dtype=np.float64))), rel=1e-3)
    assert not levels.channels_identical


def test_scan_detects_identical_channels(tmp_path):
    x = tone(1.0, 16000, 1)
    sf.write(tmp_path / "dual.wav", np.repeat(x, 2, axis=1), 16000)
    sf.write(tmp_path / "mono.wav", x, 16000)
    assert audio.scan(audio.probe(tmp_path / "dual.wav")).channels_identical
    assert audio.scan(audio.probe(tmp_path / "mono.wav")).channels_identical


def test_read_resamples(tmp_path):
    x = tone(1.0, 44100, 2)
    sf.write(tmp_path / "x.wav", x, 44100, subtype="FLOAT")
    y, sr = audio.read(tmp_path / "x.wav", sample_rate=16000)
    assert sr == 16000 and y.shape == (16000, 2) and y.dtype == np.float32


# ---- bad inputs ----

def test_probe_missing_and_folder(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        audio.probe(tmp_path / "missing.wav")
    with pytest.raises(UsageError, match="is a folder"):
        audio.probe(tmp_path)


def test_probe_bad_files(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "text.wav").write_text("this is not audio\n" * 50)
    sf.write(tmp_path / "zero.wav", np.zeros((0, 1), np.float32), 16000)
    sf.write(tmp_path / "short.wav", tone(0.4, 16000), 16000)
    sf.write(tmp_path / "slow.wav", tone(1.0, 4000), 4000)
    cases = {"empty.wav": "empty", "text.wav": "not a readable audio file", "zero.wav": "zero length",
             "short.wav": "0.40 s long", "slow.wav": "sample rate 4000 Hz"}
    for name, problem in cases.items():
        with pytest.raises(InputError, match=problem) as e:
            audio.probe(tmp_path / name)
        message = str(e.value)
        assert message.startswith(str(tmp_path / name)) and "\n" not in message


def test_probe_accepts_exactly_half_a_second(tmp_path):
    sf.write(tmp_path / "half.wav", tone(0.5, 16000), 16000)
    assert audio.probe(tmp_path / "half.wav").frames == 8000


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_scan_rejects_non_finite(tmp_path, bad):
    x = tone(1.0, 16000)
    x[20000 % len(x)] = bad
    sf.write(tmp_path / "x.wav", x, 16000, subtype="FLOAT")
    with pytest.raises(InputError, match="NaN or infinite"):
        audio.scan(audio.probe(tmp_path / "x.wav"))


def test_scan_rejects_silence(tmp_path):
    sf.write(tmp_path / "zeros.wav", np.zeros(16000, np.float32), 16000)
    sf.write(tmp_path / "hiss.wav", np.full(16000, 1e-5, np.float32), 16000, subtype="FLOAT")  # -100 dBFS
    for name in ("zeros.wav", "hiss.wav"):
        with pytest.raises(InputError, match="silent"):
            audio.scan(audio.probe(tmp_path / name))


# ---- resampling ----

@pytest.mark.parametrize("sr", RATES)
def test_stream_resampler_round_trip(sr):
    """Down to the model rate and back, in chunks of random sizes: the length is kept and the signal
    (band-limited under 8 kHz) comes back to within -50 dB away from the edges."""
    x = tone(1.3, sr, 2)
    rng = np.random.default_rng(sr)

    def stream(a, rate_in, rate_out):
        rs = audio.StreamResampler(rate_in, rate_out, a.shape[1])
        out, i = [], 0
        while i < len(a):
            k = int(rng.integers(1, 5000))
            out.append(rs(a[i:i + k]))
            i += k
        out.append(rs(np.zeros((0, a.shape[1]), np.float32), last=True))
        return np.concatenate(out)

    y = stream(x, sr, 16000)
    assert abs(len(y) - round(len(x) * 16000 / sr)) <= 1
    np.testing.assert_allclose(y, soxr.resample(x, sr, 16000, quality="HQ")[: len(y)], atol=1e-6)  # = one shot
    z = stream(y, 16000, sr)
    assert abs(len(z) - len(x)) <= 1
    edge = sr // 100  # 10 ms
    n = min(len(x), len(z))
    assert np.abs(z[edge:n - edge] - x[edge:n - edge]).max() < 1e-3


def test_stream_resampler_identity():
    x = tone(0.1, 16000, 2)
    rs = audio.StreamResampler(16000, 16000, 2)
    np.testing.assert_array_equal(rs(x), x)
    assert len(rs(np.zeros((0, 2), np.float32), last=True)) == 0


def test_model_rate_stream(tmp_path):
    x = tone(25.0, 44100, 1)  # longer than one read block
    sf.write(tmp_path / "x.wav", x, 44100, subtype="FLOAT")
    y = np.concatenate(list(audio.model_rate_stream(audio.probe(tmp_path / "x.wav"), 16000)))
    assert abs(len(y) - 25 * 16000) <= 1
    np.testing.assert_allclose(y, soxr.resample(x, 44100, 16000, quality="HQ")[: len(y)], atol=1e-5)


# ---- atomic writing ----

def test_atomic_writer_failure_keeps_existing_output(tmp_path):
    out = tmp_path / "out.wav"
    sf.write(out, tone(1.0, 16000), 16000)
    before = out.read_bytes()
    with pytest.raises(RuntimeError, match="boom"):
        with audio.AtomicWriter(out, 16000, 1) as w:
            w.write(np.zeros((8000, 1), np.float32))
            assert w.tmp.exists() and w.tmp.parent == tmp_path
            assert out.read_bytes() == before  # nothing is written to the output itself while working
            raise RuntimeError("boom")
    assert out.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_atomic_writer_interrupt_leaves_nothing(tmp_path):
    out = tmp_path / "sub" / "out.flac"
    with pytest.raises(KeyboardInterrupt):
        with audio.AtomicWriter(out, 16000, 2) as w:
            w.write(np.zeros((8000, 2), np.float32))
            raise KeyboardInterrupt
    assert not out.exists()
    assert leftovers(out.parent) == []


def test_atomic_writer_commit(tmp_path):
    out = tmp_path / "deep" / "er" / "out.wav"
    x = tone(1.0, 16000, 2)
    x[100, 0] = 1.5  # clipped, and counted
    with audio.AtomicWriter(out, 16000, 2) as w:
        w.write(x[:5000])
        w.write(x[5000:])
        assert not out.exists()
    assert w.clipped == 1
    y, sr = sf.read(out, dtype="float32")
    assert sr == 16000 and y.shape == x.shape and y[100, 0] == pytest.approx(1.0, abs=1e-4)
    assert leftovers(out.parent) == []
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's owner-only 0600


def test_atomic_writer_unsupported_extension(tmp_path):
    with pytest.raises(UsageError, match="cannot write '.xyz'"):
        audio.AtomicWriter(tmp_path / "out.xyz", 16000, 1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ext", [".wav", ".flac"])
def test_output_keeps_24_bit(tmp_path, ext):
    sf.write(tmp_path / "in24.wav", tone(1.0, 48000), 48000, subtype="PCM_24")
    sf.write(tmp_path / "in16.wav", tone(1.0, 48000), 48000, subtype="PCM_16")
    info24, info16 = audio.probe(tmp_path / "in24.wav"), audio.probe(tmp_path / "in16.wav")
    assert audio.output_subtype(info24, ext) == "PCM_24"
    assert audio.output_subtype(info16, ext) is None
    assert audio.output_subtype(info24, ".ogg") is None
    out = tmp_path / f"out{ext}"
    with audio.AtomicWriter(out, 48000, 1, audio.output_subtype(info24, ext)) as w:
        w.write(tone(1.0, 48000))
    assert sf.info(str(out)).subtype == "PCM_24"


# ---- output checks ----

def test_check_output(tmp_path):
    src = tmp_path / "in.wav"
    sf.write(src, tone(1.0, 16000), 16000)
    assert audio.check_output(src, tmp_path / "new" / "out.flac") == ("FLAC", "PCM_16")
    with pytest.raises(UsageError, match="cannot write '.xyz'"):
        audio.check_output(src, tmp_path / "out.xyz")
    with pytest.raises(UsageError, match="is the input"):
        audio.check_output(src, tmp_path / "." / "in.wav")
    with pytest.raises(UsageError, match="is a folder"):
        (tmp_path / "d.wav").mkdir()
        audio.check_output(src, tmp_path / "d.wav")
    (tmp_path / "exists.wav").write_bytes(b"x")
    with pytest.raises(UsageError, match="already exists"):
        audio.check_output(src, tmp_path / "exists.wav", overwrite=False)
    audio.check_output(src, tmp_path / "exists.wav", overwrite=True)
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile" / "out.wav", tmp_path / "afile" / "sub" / "out.wav"):
        with pytest.raises(UsageError, match="is a file, not a folder") as e:
            audio.check_output(src, out)
        assert str(e.value).startswith(str(out))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_check_output_no_permission(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(InputError, match="no permission"):
            audio.check_output(None, ro / "out.wav")
    finally:
        ro.chmod(0o755)


# ---- what killed runs leave, full disks, formats that are not read, files cut short (issue 48) ----

def dead_pid():
    """The PID of a process that has ended."""
    import subprocess
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_temporary_files_name_their_output_and_process(tmp_path):
    tmp = audio.temp_file(tmp_path / "a.wav", ".float.part")
    assert tmp.name.startswith(f".a.wav.{os.getpid()}.") and tmp.name.endswith(".float.part")
    with audio.AtomicWriter(tmp_path / "b.flac", 16000, 1) as w:
        assert w.tmp.name.startswith(f".b.flac.{os.getpid()}.") and w.tmp.name.endswith(".part")
        w.write(tone(0.6, 16000))


def test_remove_stale_temps_keeps_what_a_running_writer_holds(tmp_path):
    dead, alive = dead_pid(), os.getppid()  # pytest's parent outlives this test
    stale = [tmp_path / f".a.wav.{dead}.abcd_123.part", tmp_path / "sub" / f".b.flac.{dead}.k2j4h5g6.float.part",
             tmp_path / ".c.wav.zz9yy8xx.part"]  # older writers named no process: always stale
    kept = [tmp_path / f".d.wav.{alive}.abcdefgh.part",  # a run that is still writing
            tmp_path / ".hidden.wav", tmp_path / "notes.part", tmp_path / ".e.wav.part", tmp_path / "a.wav"]
    for p in stale + kept:
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"x")
    assert audio.remove_stale_temps(tmp_path, "b.flac") == 0  # one output's, in its own folder only
    assert audio.remove_stale_temps(tmp_path, "a.wav") == 1 and not stale[0].exists()
    assert audio.remove_stale_temps(tmp_path) == 2  # the whole tree
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)
    assert audio.remove_stale_temps(tmp_path / "missing") == 0


def test_a_full_disk_is_said_with_the_space_needed(tmp_path, monkeypatch):
    import errno
    out = tmp_path / "out.wav"
    monkeypatch.setattr(audio, "free_bytes", lambda folder: 3 * audio.MB)
    assert audio.disk_full(out, 2 * audio.MB) is None  # before the file starts: it fits
    err = audio.disk_full(out, 5 * audio.MB)
    assert str(err) == f"{out}: no space left on device (5.0 MB needed, 3.0 MB free)"
    # after a failed write: by errno, or by the space left (libsndfile's bare "System error")
    assert "no space left" in str(audio.disk_full(out, 0, OSError(errno.ENOSPC, "No space left on device")))
    assert audio.disk_full(out, 2 * audio.MB, sf.LibsndfileError(2)) is None
    full = audio.disk_full(out, 40 * audio.MB, sf.LibsndfileError(2), held=audio.MB, bound=True)
    assert str(full) == f"{out}: no space left on device (up to 40 MB needed, 4.0 MB free)"


def test_formats_that_are_not_read_are_explained(tmp_path):
    m4a = tmp_path / "talk 1.m4a"
    m4a.write_bytes(b"\0\0\0 ftypM4A " + bytes(200))
    with pytest.raises(InputError) as e:
        audio.probe(m4a)
    msg = str(e.value)
    assert msg.startswith(f"{m4a}: .m4a files (AAC or ALAC) are not read; restore reads wav, flac")
    assert "ffmpeg -i 'talk 1.m4a' 'talk 1.flac'" in msg
    junk = tmp_path / "junk.wav"
    junk.write_text("not audio\n" * 40)
    with pytest.raises(InputError, match="not a readable audio file .*; restore reads wav.*convert it first"):
        audio.probe(junk)


@pytest.mark.parametrize("ext", [".wav", ".aiff", ".au", ".rf64"])
def test_a_file_cut_short_is_noticed(tmp_path, ext):
    """libsndfile reads what a truncated file holds without a word; its header says how long it was."""
    whole, cut = tmp_path / f"whole{ext}", tmp_path / f"cut{ext}"
    for p in (whole, cut):
        sf.write(p, tone(3.0, 16000), 16000)
    with open(cut, "r+b") as f:
        f.truncate(cut.stat().st_size // 2)
    assert audio.probe(whole).truncation() is None
    info = audio.probe(cut)
    assert info.duration == pytest.approx(1.5, abs=0.01) and info.header_frames == pytest.approx(48000, abs=50)
    assert info.truncation() == "the file is cut short: its header says 3.0 s, it holds 1.5 s; that much was restored"
