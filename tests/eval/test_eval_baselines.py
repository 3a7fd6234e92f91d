"""The noisereduce and RNNoise baselines: same length, no delay, less noise, folder layout."""

import numpy as np
import pytest

pytest.importorskip("noisereduce")
pytest.importorskip("pyrnnoise")
pytest.importorskip("librosa")

from eval.audio import list_audio  # noqa: E402
from eval.baselines import main, noisereduce_denoise, rnnoise_denoise, run_baselines  # noqa: E402
from eval.metrics import estimate_lag_ms  # noqa: E402


def _noisy(clean: np.ndarray, snr_db: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    noise = np.random.default_rng(0).standard_normal(len(clean)).astype(np.float32)
    noise *= np.sqrt(np.mean(clean**2) / np.mean(noise**2)) * 10 ** (-snr_db / 20)
    return clean + noise, noise


@pytest.mark.slow
@pytest.mark.parametrize("denoise", [noisereduce_denoise, rnnoise_denoise])
def test_denoiser_keeps_length_and_timing_and_removes_noise_in_pauses(speech, denoise):
    clean = speech(4.0, seed=2)
    noisy, _ = _noisy(clean)
    out = denoise(noisy)
    assert out.shape == noisy.shape and out.dtype == np.float32
    assert estimate_lag_ms(out, clean) == 0.0  # RNNoise's 20 ms delay is compensated
    pauses = np.abs(clean) < 1e-4
    assert pauses.sum() > 4000
    # the noise floor in speech pauses drops by at least 6 dB
    assert np.mean(out[pauses] ** 2) < np.mean(noisy[pauses] ** 2) / 4


def test_rnnoise_alignment_is_sample_exact(speech):
    clean = speech(3.0, seed=3)
    out = rnnoise_denoise(clean)
    lags = range(-8, 9)
    corr = [np.dot(np.roll(out, -k)[100:-100], clean[100:-100]) for k in lags]
    assert list(lags)[int(np.argmax(corr))] == 0


def test_run_baselines_writes_system_folders(tmp_path, speech, write_wav):
    for i in range(2):
        write_wav(tmp_path / "deg" / f"c{i}.wav", _noisy(speech(2.0, seed=i))[0])
    assert main(["--degraded", str(tmp_path / "deg"), "--out", str(tmp_path / "sys"), "--quiet"]) == 0
    for name in ("noisereduce", "rnnoise"):
        assert sorted(list_audio(tmp_path / "sys" / name)) == ["c0", "c1"]
    assert (tmp_path / "sys" / "baselines.json").is_file()
    with pytest.raises(ValueError, match="unknown baselines"):
        run_baselines(tmp_path / "deg", tmp_path / "sys", ["wiener"])
    assert main(["--degraded", str(tmp_path / "missing"), "--out", str(tmp_path / "sys"), "--quiet"]) == 2


def test_gentler_noisereduce_gets_its_own_folder(tmp_path, speech, write_wav):
    import json

    write_wav(tmp_path / "deg" / "c0.wav", _noisy(speech(2.0))[0])
    run_baselines(tmp_path / "deg", tmp_path / "sys", ["noisereduce"], quiet=True, noisereduce_prop_decrease=0.8)
    run_baselines(tmp_path / "deg", tmp_path / "sys", ["noisereduce"], quiet=True)
    info = json.loads((tmp_path / "sys" / "baselines.json").read_text())
    assert "prop_decrease=0.8" in info["noisereduce_p0.8"]["settings"]
    assert "prop_decrease=1" in info["noisereduce"]["settings"]
    gentle = list_audio(tmp_path / "sys" / "noisereduce_p0.8")["c0"]
    full = list_audio(tmp_path / "sys" / "noisereduce")["c0"]
    assert gentle.read_bytes() != full.read_bytes()
    with pytest.raises(ValueError, match="prop_decrease"):
        run_baselines(tmp_path / "deg", tmp_path / "sys", quiet=True, noisereduce_prop_decrease=0.0)
