"""Keeping the input where the restoration agrees with it (restore/pipeline/keep.py), and the option's
way from the command line to the sampler."""

import json

import numpy as np
import pytest
import soundfile as sf
import torch

from restore.codec import STFTCodec
from restore.config import CodecConfig
from restore.errors import UsageError
from restore.pipeline.keep import keep_input
from restore.pipeline.restorer import sampler_config
from tests.conftest import speechlike

CODEC = STFTCodec(CodecConfig(scale=3.0, power=0.5))
SR = 16000


def speech(seconds=2.0, seed=0):
    x = torch.from_numpy(speechlike(seconds, SR, seed=seed)).float()[None]
    return x[:, : x.shape[-1] // 256 * 256]


def band_noise(n, lo_hz, hi_hz, rms, seed=1):
    spec = torch.fft.rfft(torch.randn(1, n, generator=torch.Generator().manual_seed(seed)))
    f = torch.fft.rfftfreq(n, 1 / SR)
    spec[:, (f < lo_hz) | (f > hi_hz)] = 0
    x = torch.fft.irfft(spec, n=n)
    return x * rms / x.square().mean().sqrt()


def band_energy(x, lo_hz, hi_hz):
    spec = torch.fft.rfft(x).abs().square()
    f = torch.fft.rfftfreq(x.shape[-1], 1 / SR)
    return float(spec[:, (f >= lo_hz) & (f <= hi_hz)].sum())


def test_an_estimate_equal_to_the_input_gives_the_input_back():
    x = speech()
    y = CODEC.encode(x)
    out = CODEC.decode(keep_input(CODEC, y, y, 12.0))
    assert float((out - x).norm() / x.norm()) < 1e-4


def test_the_output_keeps_the_restorations_level():
    """A restoration at half the input's level (a model that levels differently) agrees with the input
    everywhere: the input comes back, at the restoration's level."""
    x = speech()
    out = CODEC.decode(keep_input(CODEC, CODEC.encode(x), CODEC.encode(0.5 * x), 12.0))
    assert float((out - 0.5 * x).norm() / (0.5 * x).norm()) < 1e-3


def test_what_the_restoration_removed_stays_removed_and_the_rest_comes_from_the_input():
    """Input: speech plus loud noise at 5-7 kHz. Estimate: the speech with its fine structure lost
    (a slightly different take) and no noise. The noise band follows the estimate; where the speech is
    strong the output moves from the estimate to the input."""
    clean = speech(seed=0)
    noise = band_noise(clean.shape[-1], 5000, 7000, rms=float(clean.square().mean().sqrt()))
    noisy = clean + noise
    est = 0.9 * clean + 0.1 * speech(seed=3)  # mostly right, a little redrawn
    out = CODEC.decode(keep_input(CODEC, CODEC.encode(noisy), CODEC.encode(est), 12.0))
    assert band_energy(out - est, 5000, 7000) < 0.05 * band_energy(noise, 5000, 7000)
    low = lambda z: band_energy(z, 100, 3000)  # noqa: E731
    assert low(out - clean) < 0.5 * low(est - clean)  # closer to the input's speech than the estimate was


def test_a_higher_level_keeps_less_of_the_input():
    clean, other = speech(seed=0), speech(seed=3)
    y, s = CODEC.encode(clean), CODEC.encode(0.8 * clean + 0.2 * other)
    dist = [float((CODEC.decode(keep_input(CODEC, y, s, db)) - clean).norm()) for db in (0.0, 12.0, 30.0)]
    assert dist[0] < dist[1] < dist[2]


def test_the_option_parses_and_refuses_clearly():
    assert sampler_config("flash").keep_db is None
    assert sampler_config("flash", keep="12").keep_db == 12.0
    assert sampler_config("flash", keep=6.5).keep_db == 6.5
    assert sampler_config("flash", model_presets={"flash": {"keep_db": 12.0}}).keep_db == 12.0
    assert sampler_config("flash", model_presets={"flash": {"keep_db": 12.0}}, keep="off").keep_db is None
    with pytest.raises(UsageError, match="'off' or a level in dB"):
        sampler_config("flash", keep="lots")
    with pytest.raises(UsageError, match="between -20 and 40"):
        sampler_config("flash", keep="90")


def test_keep_input_reaches_the_sampler_and_changes_the_output(live_model, tmp_path):
    from typer.testing import CliRunner

    from restore.cli import app
    src = tmp_path / "in.wav"
    sf.write(src, speechlike(1.0, SR), SR)
    base = ["--model", str(live_model), "--sampler", "flash", "--steps", "1"]
    outs = {}
    for name, extra in (("off", []), ("k12", ["--keep-input", "12"]), ("k0", ["--keep-input", "0"])):
        r = CliRunner().invoke(app, [str(src), "-o", str(tmp_path / f"{name}.wav"), "--report",
                                     str(tmp_path / f"{name}.json")] + extra + base)
        assert r.exit_code == 0, r.output
        outs[name] = sf.read(tmp_path / f"{name}.wav")[0]
        rep = json.loads((tmp_path / f"{name}.json").read_text())["files"][0]
        assert rep["sampler"]["keep_db"] == {"off": None, "k12": 12.0, "k0": 0.0}[name]
    src_audio = sf.read(src)[0]
    err = lambda a: float(np.linalg.norm(a - src_audio * np.dot(a, src_audio) / np.dot(src_audio, src_audio)))  # noqa: E731
    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))  # noqa: E731
    assert rel(outs["k0"], outs["off"]) > 1e-2
    assert err(outs["k0"]) < err(outs["off"])  # keeping more of the input lands nearer to it
    bad = CliRunner().invoke(app, [str(src), "-o", str(tmp_path / "bad.wav"), "--keep-input", "x"] + base)
    assert bad.exit_code == 2 and "'off' or a level in dB" in bad.output and not (tmp_path / "bad.wav").exists()
