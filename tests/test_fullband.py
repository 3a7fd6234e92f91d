"""Full-band outputs (issue 46, restore/pipeline/fullband.py): above the model's band the output is the
input's own band, cleaned with the restoration as the guide, joined without a seam.

The band module is tested with a stand-in restoration (the input, or the clean speech, through the
model's rate and back, as the pipeline resamples it); the end-to-end tests go through the pipeline
with the tiny test model, whose one-step restoration is the input itself at a quarter of its level
(zero network output: the observation skip's prior mean), so the output must be the input at full
band."""

import json

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch
from typer.testing import CliRunner

from restore import audio, bandwidth
from restore.cli import app
from restore.config import WindowConfig
from restore.pipeline import fullband
from restore.pipeline.restorer import Restorer

SR = 48000
MODEL_RATE = 16000
PERIOD = 0.8                 # s: a word (voiced 0-0.35 s, fricative 0.3-0.5 s), then a pause
PAUSE = (0.58, 0.74)         # the pause's frames, away from the word's edges and reverberation-free


def fullband_speech(seconds: float, sr: int = SR, seed: int = 0) -> np.ndarray:
    """Words of a voiced part (harmonics of a gliding f0 up to 14 kHz, falling 6 dB per octave) and a
    fricative (noise in 3-20 kHz), then a pause, over a floor 50 dB down: speech with an upper band."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sr)
    t = np.arange(n) / sr
    f0 = 130 + 20 * np.sin(2 * np.pi * 0.9 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    voiced = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, int(14000 / 150)))
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / sr)
    spec[(f < 3000) | (f > 20000)] = 0
    fric = np.fft.irfft(spec, n)
    fric *= 0.5 / fric.std()
    u = t % PERIOD

    def hann(a, b):
        return np.where((u >= a) & (u < b), np.sin(np.pi * (u - a) / (b - a)) ** 2, 0.0)

    x = 0.1 * (voiced * hann(0.0, 0.35) + fric * hann(0.3, 0.5)) + 2e-4 * rng.standard_normal(n)
    return x.astype(np.float32)


def through_model_rate(x: np.ndarray, sr: int = SR) -> np.ndarray:
    """x at the model's rate and back, as the pipeline resamples a restoration: nothing above ~7.3 kHz."""
    y = soxr.resample(soxr.resample(x, sr, MODEL_RATE, quality="HQ"), MODEL_RATE, sr, quality="HQ")
    return np.pad(y, (0, max(0, len(x) - len(y))))[: len(x)].astype(np.float32)


def band_db(y: np.ndarray, x: np.ndarray, lo: float, hi: float, sr: int = SR, frames=None) -> float:
    """Level of y against x in [lo, hi) Hz (over the given STFT frames, or all), in dB."""
    def power(a):
        spec = fullband.stft(a, 1024, 256)
        f = np.fft.rfftfreq(1024, 1 / sr)
        p = np.abs(spec[:, (f >= lo) & (f < hi)]) ** 2
        return p[frames].sum() if frames is not None else p.sum()
    return 10 * np.log10(power(y) / power(x))


def pause_frames(n: int, sr: int = SR, hop: int = 256) -> np.ndarray:
    t = np.arange(n // hop + 1) * hop / sr
    return ((t % PERIOD) >= PAUSE[0]) & ((t % PERIOD) < PAUSE[1])


def third_octaves(lo: float = 100.0, hi: float = 20000.0):
    centres = 1000 * 2.0 ** (np.arange(-10, 14) / 3)
    return [(c * 2 ** (-1 / 6), c * 2 ** (1 / 6)) for c in centres if lo <= c <= hi]


def third_octave_error(y: np.ndarray, x: np.ndarray, sr: int = SR) -> float:
    """The largest level difference (dB) of y against x over the third-octave bands 100 Hz-20 kHz."""
    f = np.fft.rfftfreq(len(x), 1 / sr)
    py, px = (np.abs(np.fft.rfft(a.astype(np.float64))) ** 2 for a in (y, x))
    return max(abs(10 * np.log10(py[(f >= lo) & (f < hi)].sum() / px[(f >= lo) & (f < hi)].sum()))
               for lo, hi in third_octaves())


def lowpass(x: np.ndarray, hz: float, sr: int = SR) -> np.ndarray:
    spec = np.fft.rfft(x)
    spec[np.fft.rfftfreq(len(x), 1 / sr) > hz] = 0
    return np.fft.irfft(spec, len(x)).astype(np.float32)


def combine(x, s, **kw):
    return fullband.combine(x[:, None], s[:, None], SR, **kw)[:, 0]


# ---- the band module, with stand-in restorations ----

def test_applies_only_where_both_rates_carry_a_band_above_the_models():
    assert fullband.applies(48000, 48000, MODEL_RATE) and fullband.applies(44100, 22050, MODEL_RATE)
    assert not fullband.applies(16000, 48000, MODEL_RATE)  # nothing above 8 kHz to keep
    assert not fullband.applies(48000, 16000, MODEL_RATE)
    assert not fullband.applies(8000, 8000, MODEL_RATE)


def test_identity_when_the_restoration_is_the_input():
    x = fullband_speech(2.0)
    np.testing.assert_allclose(combine(x, x, strength=0.0), x, atol=1e-5)


def test_clean_recording_keeps_its_upper_band():
    """Issue 46: energy above 8 kHz within 2 dB of the input's, every third-octave band from 100 Hz to
    20 kHz within 1 dB."""
    x = fullband_speech(4.0)
    y = combine(x, through_model_rate(x))
    assert abs(band_db(y, x, 8000, 24000)) < 2.0
    worst = third_octave_error(y, x)
    assert worst < 1.0, worst
    assert worst < 0.1, worst  # measured 0.001 dB: the join leaves a clean recording as it was


def sweep(seconds: float = 4.0, sr: int = SR, lo: float = 50.0, hi: float = 22000.0) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    k = np.log(hi / lo)
    return (0.3 * np.sin(2 * np.pi * lo * seconds / k * (np.exp(t / seconds * k) - 1))).astype(np.float32)


def sweep_response(y, x, sr=SR, seconds=4.0, lo=50.0, hi=22000.0, band=(1000.0, 20000.0)):
    """Level of y against x (dB) in each frame of the sweep whose frequency lies in `band`, and those
    frequencies."""
    ex, ey = (np.abs(fullband.stft(a, 1024, 256)) ** 2 for a in (x, y))
    t = np.arange(ex.shape[0]) * 256 / sr
    freq = lo * np.exp(t / seconds * np.log(hi / lo))
    sel = (freq >= band[0]) & (freq <= band[1])
    return 10 * np.log10(ey[sel].sum(1) / ex[sel].sum(1)), freq[sel]


@pytest.mark.parametrize("level", [1.0, 0.5])
def test_sweep_through_the_crossover_has_no_step_or_notch(level):
    """A sweep whose restoration is itself through the model's rate (at its level, or quieter, as a
    restoration can come out): the output is flat through the crossover and above it, at the
    restoration's level, with no notch from phase cancellation."""
    x = sweep()
    db, freq = sweep_response(combine(x, level * through_model_rate(x)), x)
    target = 20 * np.log10(level)
    assert np.abs(db - target).max() < 0.3, (freq[np.argmax(np.abs(db - target))], np.abs(db - target).max())


def noisy_case(seconds=4.8, snr_db=10.0, residual=0.1, seed=0):
    """Clean full-band speech, a noise (pink below, hiss above: 10 dB SNR over the whole band), and a
    stand-in restoration: the clean speech plus `residual` of the noise, through the model's rate."""
    rng = np.random.default_rng(seed + 7)
    x = fullband_speech(seconds, seed=seed)
    n = len(x)
    f = np.fft.rfftfreq(n, 1 / SR)
    spec = np.fft.rfft(rng.standard_normal(n)) / np.sqrt(np.maximum(f, 50.0) / 1000.0)  # pink
    spec *= 1 + 3 * (f > 9000)                                                          # with hiss above 9 kHz
    noise = np.fft.irfft(spec, n)
    # a slow swell, so the noise is not perfectly stationary
    noise *= 1 + 0.3 * np.sin(2 * np.pi * 0.3 * np.arange(n) / SR)
    noise *= np.sqrt(np.mean(x.astype(np.float64) ** 2) / np.mean(noise**2)) / 10 ** (snr_db / 20)
    noise = noise.astype(np.float32)
    return x, x + noise, through_model_rate(x + residual * noise)


def test_noise_above_the_model_band_is_removed():
    """Issue 46, at 10 dB SNR: the noise above 8 kHz in the pauses at least 10 dB lower than in the
    input, the speech above 8 kHz within 3 dB of the clean reference."""
    clean, noisy, rest = noisy_case()
    y = combine(noisy, rest, strength=1.0)
    pauses = pause_frames(len(y))
    removed = band_db(y, noisy, 8000, 24000, frames=pauses)
    assert removed < -10.0, removed
    speech = ~pauses
    kept = band_db(y, clean, 8000, 24000, frames=speech)
    assert abs(kept) < 3.0, kept


def test_strength_scales_the_noise_floor():
    """At strength 0 only the guide acts; stronger takes more of the noise floor out."""
    _, noisy, _ = noisy_case()
    pauses = pause_frames(len(noisy))
    # a restoration that took nothing out: only the noise floor can act
    removed = [band_db(combine(noisy, through_model_rate(noisy), strength=s), noisy, 8000, 24000, frames=pauses)
               for s in (0.0, 0.5, 1.0, 2.0)]
    assert abs(removed[0]) < 0.05, removed
    assert removed[0] > removed[1] > removed[2] > removed[3], removed
    assert removed[2] < -10.0, removed


def test_reverberation_tails_are_shortened():
    """The guide's frame gains: where the restoration has no tail, the upper band loses its tail too."""
    rng = np.random.default_rng(3)
    x = fullband_speech(4.0)
    t = np.arange(int(0.6 * SR)) / SR
    rir = rng.standard_normal(len(t)) * np.exp(-6.9 * t / 0.5) * 0.3  # RT60 0.5 s
    rir[0] = 1.0
    size = len(x) + len(rir)
    wet = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(rir, size), size)[: len(x)].astype(np.float32)
    y = combine(wet, through_model_rate(x))
    tails = pause_frames(len(x))
    assert band_db(y, wet, 8000, 24000, frames=tails) < -10.0
    assert abs(band_db(y, x, 8000, 24000, frames=~tails)) < 3.0


def above_db(y: np.ndarray, x: np.ndarray, hz: float, sr: int = SR) -> float:
    """Energy of y above `hz` against x's whole energy (dB), from one FFT of each."""
    f = np.fft.rfftfreq(len(x), 1 / sr)
    py, px = (np.abs(np.fft.rfft(a.astype(np.float64))) ** 2 for a in (y, x))
    return 10 * np.log10(py[f > hz].sum() / px.sum())


def test_band_limited_inputs_get_nothing_above_their_cut_off():
    x = fullband_speech(3.0)
    # a low-rate mp3: nothing above 11 kHz
    mp3 = lowpass(x, 11000)
    y = combine(mp3, through_model_rate(mp3))
    # (a gain that changes from frame to frame smears a little of what lies just below, at -95 dB)
    assert above_db(y, mp3, 11500) < -100 and above_db(mp3, mp3, 11500) < -100
    # a phone line: nothing above 3.4 kHz, restored by a model that extends it to ~7 kHz; above the
    # crossover nothing comes out that the input lacks
    phone = lowpass(x, 3400)
    y = combine(phone, through_model_rate(x))
    assert above_db(y, phone, fullband.CROSSOVER_HZ[1] + 50) < -100


def test_channels_are_joined_independently():
    a, b = fullband_speech(2.0, seed=1), fullband_speech(2.0, seed=2)
    x = np.stack([a, b], axis=1)
    s = np.stack([through_model_rate(a), 0.5 * through_model_rate(b)], axis=1)
    y = fullband.combine(x, s, SR)
    np.testing.assert_array_equal(y[:, 0], fullband.combine(x[:, :1], s[:, :1], SR)[:, 0])
    np.testing.assert_array_equal(y[:, 1], fullband.combine(x[:, 1:], s[:, 1:], SR)[:, 0])


@pytest.mark.parametrize("rate", [44100, 22050])
def test_stream_equals_whole_file(rate, monkeypatch):
    """Pushed in blocks of any sizes, the join gives exactly the whole-file result (chunks on the frame
    grid with their context), and the stream's memory stays bounded."""
    monkeypatch.setattr(fullband, "CHUNK_SECONDS", 0.7)
    rng = np.random.default_rng(0)
    n = int(5.3 * rate) + 37
    x = np.stack([fullband_speech(n / rate, rate, seed=1)[:n], fullband_speech(n / rate, rate, seed=2)[:n]], axis=1)
    x = x + 0.01 * rng.standard_normal(x.shape).astype(np.float32)
    s = np.stack([through_model_rate(x[:, c], rate) for c in range(2)], axis=1) * 0.7
    whole = fullband.combine(x, s, rate)
    joiner = fullband.BandJoiner(rate, 2)
    out, pos, held = [], 0, 0
    while pos < n:
        k = int(rng.integers(1, rate))
        out.append(joiner.push(x[pos : pos + k], s[pos : pos + k], last=pos + k >= n))
        pos += k
        held = max(held, len(joiner.x))
    y = np.concatenate(out)
    assert y.shape == whole.shape
    np.testing.assert_allclose(y, whole, atol=1e-6)
    assert held < 0.7 * rate + 3 * fullband.reach(rate) + rate


# ---- end to end, with the tiny test model ----

@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def restorer(tiny_model):
    return Restorer(tiny_model, window=WindowConfig(seconds=3.0, overlap=0.5))


FAST = {"sampler": "flash", "steps": 1}


def test_pipeline_keeps_a_clean_recordings_full_band(restorer, tmp_path):
    """Issue 46 through the library: a clean 48 kHz recording (over several windows) comes back with its
    upper band, every third-octave band within 1 dB."""
    x = fullband_speech(5.0)
    sf.write(tmp_path / "in.wav", x, SR, subtype="FLOAT")
    restorer.restore_file(tmp_path / "in.wav", tmp_path / "out.wav", **FAST)
    y, sr = sf.read(tmp_path / "out.wav", dtype="float32")
    assert sr == SR and len(y) == len(x)
    assert abs(band_db(y, x, 8000, 24000)) < 2.0
    worst = third_octave_error(y, x)
    assert worst < 1.0, worst


def test_pipeline_sweep_has_no_seam(restorer, tmp_path):
    """The pipeline's restoration is time-aligned with the input (resampling in and out, windows,
    crossfades): a sweep comes out flat through the crossover, no notch."""
    x = sweep()
    sf.write(tmp_path / "sweep.wav", x, SR, subtype="FLOAT")
    restorer.restore_file(tmp_path / "sweep.wav", tmp_path / "out.wav", **FAST)
    y, _ = sf.read(tmp_path / "out.wav", dtype="float32")
    db, freq = sweep_response(y, x)
    assert np.abs(db - np.median(db)).max() < 0.5, freq[np.argmax(np.abs(db - np.median(db)))]


@pytest.mark.parametrize("rate, channels", [(44100, 2), (48000, 6)])
def test_pipeline_multichannel_keeps_every_channels_band(restorer, tmp_path, rate, channels):
    chans = [fullband_speech(2.0, rate, seed=c) * (1 - 0.1 * c) for c in range(channels)]
    x = np.stack(chans, axis=1)
    sf.write(tmp_path / "in.flac", x, rate, subtype="PCM_24")
    x, _ = sf.read(tmp_path / "in.flac", dtype="float32")
    rep = restorer.restore_file(tmp_path / "in.flac", tmp_path / "out.flac", **FAST)
    y, sr = sf.read(tmp_path / "out.flac", dtype="float32")
    assert rep.channels_restored == channels and y.shape == x.shape and sr == rate
    for c in range(channels):
        assert abs(band_db(y[:, c], x[:, c], 8000, rate / 2, sr=rate)) < 2.0


def test_pipeline_strength_zero_gives_back_the_input_above_the_crossover(restorer, tmp_path):
    """Strength 0 takes none of the noise floor out: above the crossover the output is the input (here
    with a restoration that took nothing out; the shipped model's linear estimate does not either).
    Strength 1 takes the hiss out of the pauses."""
    _, noisy, _ = noisy_case(seconds=4.0)
    sf.write(tmp_path / "in.wav", noisy, SR, subtype="FLOAT")
    pauses = pause_frames(len(noisy))
    out = {}
    for s in (0.0, 1.0):
        restorer.restore_file(tmp_path / "in.wav", tmp_path / f"out{s}.wav", strength=s, level="model", **FAST)
        out[s], _ = sf.read(tmp_path / f"out{s}.wav", dtype="float32")
    level = 0.25  # the tiny model's restoration: the input at a quarter of its level
    hi = np.fft.rfftfreq(len(noisy), 1 / SR) > fullband.CROSSOVER_HZ[1]
    above = lambda a: np.fft.irfft(np.fft.rfft(a) * hi, len(a))[SR // 10 : -SR // 10]  # off the FFT's wrap
    np.testing.assert_allclose(above(out[0.0]), level * above(noisy), atol=2e-3 * np.abs(level * noisy).max())
    assert band_db(out[1.0], level * noisy, 8000, 24000, frames=pauses) < -10.0


def test_cli_keeps_the_upper_band(tiny_model, tmp_path):
    x = fullband_speech(2.0)
    sf.write(tmp_path / "in.wav", x, SR, subtype="PCM_24")
    x, _ = sf.read(tmp_path / "in.wav", dtype="float32")
    result = CliRunner().invoke(app, [str(tmp_path / "in.wav"), "-o", str(tmp_path / "out.flac"),
                                      "--model", str(tiny_model), "--sampler", "flash", "--steps", "1"])
    assert result.exit_code == 0, result.output
    y, sr = sf.read(tmp_path / "out.flac", dtype="float32")
    assert sr == SR
    assert abs(band_db(y, x, 8000, 24000)) < 2.0
    assert abs(band_db(y, x, 12000, 20000)) < 2.0


# ---- band-limited inputs: nothing added above their cut-off unless asked (restore/bandwidth.py) ----

def measured_cutoff(x: np.ndarray, sr: int, blocks: int = 5) -> float | None:
    """The cut-off the level scan finds, fed in blocks as audio.scan feeds it."""
    spec = bandwidth.LongTermSpectrum(sr)
    for block in np.array_split(x, blocks):
        spec.push(block)
    return spec.cutoff()


def band_limited(seconds: float, cut: float, sr: int, snr_db: float | None = 5.0, floor_db: float = -80.0,
                 seed: int = 0) -> np.ndarray:
    """Speech (with pink-ish noise at `snr_db` under it, if given) low-passed at `cut`, over a white floor
    `floor_db` below full scale (a recording chain's)."""
    rng = np.random.default_rng(seed + 11)
    x = fullband_speech(seconds, sr, seed=seed).astype(np.float64)
    if snr_db is not None:
        n = len(x)
        spec = np.fft.rfft(rng.standard_normal(n)) / np.sqrt(np.maximum(np.fft.rfftfreq(n, 1 / sr), 100.0) / 1000)
        noise = np.fft.irfft(spec, n)
        x = x + noise * np.sqrt(np.mean(x**2) / np.mean(noise**2)) / 10 ** (snr_db / 20)
    y = lowpass(x.astype(np.float32), cut, sr)
    return (y + 10 ** (floor_db / 20) * rng.standard_normal(len(y))).astype(np.float32)


@pytest.mark.parametrize("sr", [16000, 48000])
@pytest.mark.parametrize("cut", [2000.0, 3400.0, 5000.0, 6500.0])
def test_cutoff_is_found_under_noise_below_it(sr, cut):
    found = measured_cutoff(band_limited(3.0, cut, sr), sr)
    assert found is not None and abs(found - cut) < 300, found
    assert bandwidth.limit(found, MODEL_RATE) == found  # below the model's band edge: band-limited


def test_cutoff_of_a_short_file():
    for cut in (3400.0, 5000.0):
        found = measured_cutoff(band_limited(0.5, cut, 16000, seed=3), 16000)
        assert found is not None and abs(found - cut) < 300, (cut, found)


@pytest.mark.parametrize("sr", [16000, 48000])
def test_full_band_and_silent_inputs_have_no_cutoff(sr):
    x = fullband_speech(3.0, sr)
    found = measured_cutoff(x, sr)
    assert found is None or found > 8000, found
    assert bandwidth.limit(found, MODEL_RATE) is None
    # through the resampler to the model's rate its band ends in the resampler's transition: still full band
    y = soxr.resample(x, sr, MODEL_RATE, quality="HQ")
    assert bandwidth.limit(measured_cutoff(y, MODEL_RATE), MODEL_RATE) is None
    assert measured_cutoff(np.zeros(2 * sr, np.float32), sr) is None
    # speech with pauses of digital silence: the silence does not count
    gated = x * (np.arange(len(x)) % sr < sr // 2)
    assert bandwidth.limit(measured_cutoff(gated, sr), MODEL_RATE) is None


def test_the_level_scan_reports_the_band(tmp_path):
    """audio.scan measures the cut-off of the mono mix; an 8 kHz file's band ends at 4 kHz."""
    x = band_limited(2.0, 3400.0, SR)
    sf.write(tmp_path / "phone.wav", np.stack([x, 0.5 * x], axis=1), SR, subtype="FLOAT")
    assert abs(audio.scan(audio.probe(tmp_path / "phone.wav")).cutoff_hz - 3400) < 300
    sf.write(tmp_path / "narrow.wav", fullband_speech(2.0, 8000), 8000, subtype="PCM_16")
    cut = audio.scan(audio.probe(tmp_path / "narrow.wav")).cutoff_hz
    assert 3000 < cut <= 4000 and bandwidth.limit(cut, MODEL_RATE) == cut
    sf.write(tmp_path / "wide.wav", fullband_speech(2.0), SR, subtype="PCM_24")
    assert bandwidth.limit(audio.scan(audio.probe(tmp_path / "wide.wav")).cutoff_hz, MODEL_RATE) is None


def test_limit_band_takes_the_restoration_out_above_the_cutoff_only():
    """A restoration that fills a missing band: above the cut-off nothing is left, below the fade it is
    untouched; each file of a shared window gets its own cut-off."""
    from restore.codec import STFTCodec
    from restore.config import CodecConfig
    from restore.pipeline import post

    codec = STFTCodec(CodecConfig(scale=3.0))
    x = torch.from_numpy(fullband_speech(2.0, MODEL_RATE))[None, : 2 * MODEL_RATE // 256 * 256]
    est = codec.encode(x)
    n = est.shape[1] // 2
    out = codec.decode(post.limit_band(codec, est, [[3000.0, None]], [[(0, n), (n, 2 * n)]]))[0].numpy()
    a, b = x[0, : n * 256 - 512].numpy(), out[: n * 256 - 512]
    assert band_db(b, a, 3100, 8000, sr=MODEL_RATE) < -40
    assert abs(band_db(b, a, 100, 2600, sr=MODEL_RATE)) < 0.05
    tail = slice(n * 256 + 512, None)
    np.testing.assert_allclose(out[tail], x[0, tail].numpy(), atol=1e-4)


@pytest.fixture(scope="module")
def live_restorer(live_model):
    """A model whose random network output fills every band, a missing one too."""
    return Restorer(live_model, window=WindowConfig(seconds=3.0, overlap=0.5))


@pytest.mark.parametrize("sr", [16000, 48000])
def test_band_limited_input_is_filled_by_default_and_kept_to_its_band_on_request(live_restorer, tmp_path,
                                                                                 monkeypatch, sr):
    """A phone line: by default the model fills its band as it did before cut-offs were measured (here: far
    above the input's); with extend_band False the output carries no more above the cut-off than the
    input, and below it the restoration is the same."""
    cut = 3400.0
    x = band_limited(2.5, cut, sr)
    sf.write(tmp_path / "phone.wav", x, sr, subtype="FLOAT")
    rep = live_restorer.restore_file(tmp_path / "phone.wav", tmp_path / "default.wav", **FAST)
    kept = live_restorer.restore_file(tmp_path / "phone.wav", tmp_path / "kept.wav", extend_band=False, **FAST)
    monkeypatch.setattr(bandwidth, "limit", lambda *a: None)  # no cut-off known: the code before
    live_restorer.restore_file(tmp_path / "phone.wav", tmp_path / "before.wav", **FAST)
    e, y, b = (sf.read(tmp_path / f"{n}.wav", dtype="float32")[0] for n in ("default", "kept", "before"))
    np.testing.assert_array_equal(e, b)
    assert abs(kept.cutoff_hz - cut) < 300 and rep.cutoff_hz == kept.cutoff_hz
    assert rep.sampler["extend_band"] is True and kept.sampler["extend_band"] is False
    top = min(sr / 2, 8000)
    assert above_db(y, x, kept.cutoff_hz, sr) - above_db(x, x, kept.cutoff_hz, sr) < 1.0
    assert band_db(y, x, kept.cutoff_hz, top, sr=sr) < 1.0
    assert band_db(e, x, kept.cutoff_hz, top, sr=sr) > 10.0  # the model does fill it, by default
    assert abs(band_db(y, e, 300, cut - 400, sr=sr)) < 0.5  # below the cut-off: the same restoration


def test_cli_extend_band_reaches_the_pipeline_and_the_report(tiny_model, tmp_path):
    sf.write(tmp_path / "in.wav", band_limited(1.5, 3400.0, MODEL_RATE), MODEL_RATE, subtype="FLOAT")
    runs = {}
    for name, flag in (("default", []), ("kept", ["--band", "keep"]), ("extended", ["--band", "extend"])):
        result = CliRunner().invoke(app, [str(tmp_path / "in.wav"), "-o", str(tmp_path / f"{name}.wav"), *flag,
                                          "--report", str(tmp_path / f"{name}.json"), "--model", str(tiny_model),
                                          "--sampler", "flash", "--steps", "1"])
        assert result.exit_code == 0, result.output
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text())["files"][0]
    assert [runs[n]["sampler"]["extend_band"] for n in ("default", "kept", "extended")] == [True, False, True]
    assert abs(runs["default"]["cutoff_hz"] - 3400) < 300
    assert "--band" in CliRunner().invoke(app, ["--help"]).output


def test_extend_band_option_takes_a_bool_or_the_models_setting():
    from restore.errors import UsageError
    from restore.options import RestoreOptions
    assert RestoreOptions().extend_band is None and RestoreOptions(extend_band=False).extend_band is False
    with pytest.raises(UsageError, match="extend_band"):
        RestoreOptions(extend_band="no")
