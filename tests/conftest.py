import os

import numpy as np
import pytest
import soundfile as sf
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true",
                     help="rewrite tests/golden.json from the shipped model's restoration of the example "
                          "(after replacing the model; review the diff)")


TINY_MODEL = {"width": 64, "layers": 2, "heads": 2, "intermediate": 128, "precondition": "obs_skip",
              "encoder": {"width": 32, "layers": 1, "out_dim": 32},
              "text": {"width": 32, "layers": 1, "heads": 2}}


def speechlike(seconds: float, sr: int = 16000, seed: int = 0) -> np.ndarray:
    """A voiced, syllable-modulated harmonic signal with a little noise: enough structure for the
    pipeline, no data files needed."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    x = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = np.clip(np.sin(2 * np.pi * 3.0 * t), 0, None) ** 2
    return (0.1 * x * envelope + 0.003 * rng.standard_normal(len(t))).astype(np.float32)


def tone(seconds: float, sr: int, channels: int = 1) -> np.ndarray:
    """A band-limited signal (everything under 4 kHz), (frames, channels), each channel different."""
    t = np.arange(int(round(seconds * sr))) / sr
    cols = [0.2 * np.sin(2 * np.pi * (300 + 40 * c) * t) + 0.1 * np.sin(2 * np.pi * 1234.5 * t + c)
            + 0.05 * np.sin(2 * np.pi * 3100 * t) for c in range(channels)]
    return np.stack(cols, axis=1).astype(np.float32)


def leftovers(folder):
    """Temporary files the atomic writer may have left."""
    return [p.name for p in folder.iterdir() if p.name.endswith(".part") or p.name.startswith(".")]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A randomly initialised tiny model folder (for plumbing tests only, never shipped)."""
    from restore import weights
    from restore.config import CodecConfig, ModelConfig
    from restore.model.dit import DiT

    torch.manual_seed(0)
    cfg = ModelConfig.from_dict(TINY_MODEL)
    codec = CodecConfig(scale=3.0)
    folder = tmp_path_factory.mktemp("tiny_model")
    weights.save(folder, cfg, codec, DiT(cfg, codec).state_dict(), dtype=torch.float32)
    return folder


@pytest.fixture(scope="session")
def live_model(tiny_model, tmp_path_factory):
    """The tiny model with its zero-initialised layers (adaLN-zero modulation, output layer) made random:
    a freshly initialised DiT predicts zero velocity, so its output would not depend on the input or
    the transcript at all."""
    from restore import weights

    files = weights.load(tiny_model)
    g = torch.Generator().manual_seed(1)
    state = {k: v + 0.05 * torch.randn(v.shape, generator=g) if v.is_floating_point() and not v.any() else v
             for k, v in files.state.items()}
    folder = tmp_path_factory.mktemp("live_model")
    weights.save(folder, files.model, files.codec, state, dtype=torch.float32)
    return folder


@pytest.fixture
def wav(tmp_path):
    """Write a speech-like file: wav(name, seconds, sr=16000, channels=1) -> path."""
    def make(name="in.wav", seconds=2.0, sr=16000, channels=1, subtype=None):
        x = speechlike(seconds, sr)
        if channels > 1:
            x = np.stack([x * (0.8 + 0.2 * c) for c in range(channels)], axis=1)
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, x, sr, subtype=subtype)
        return path
    return make


@pytest.fixture(scope="session")
def train_data_dir(tmp_path_factory):
    """A training data folder in the staged format (int16 shards and JSON indexes, as
    scripts/prepare_data.py writes it): four short transcribed utterances, a noise, a room."""
    from restore.training.data import to_int16, write_shards

    sr = 16000
    out = tmp_path_factory.mktemp("train_data")
    rng = np.random.default_rng(0)
    speech = [(speechlike(6.0, seed=i) * 0.3, {"path": f"s{i}.wav", "speaker": f"spk{i}", "text": "a test",
                                                "text_kind": "human"}) for i in range(4)]
    write_shards(out, "speech", speech, 1 << 20)
    noise = [(rng.standard_normal(sr * 2).astype(np.float32) * 0.1, {"path": "n.wav", "license": "test"})]
    write_shards(out, "noise", noise, 1 << 20)
    rir = np.zeros(sr // 4, np.float32)
    rir[0], rir[400:] = 0.9, 0.1 * np.exp(-np.arange(sr // 4 - 400) / 800) * rng.standard_normal(sr // 4 - 400)
    write_shards(out, "rir", [(rir, {"path": "r.wav", "license": "test"})], 1 << 20)
    clean = np.stack([speechlike(2.048, seed=9) * 0.3])
    degraded = clean + rng.standard_normal(clean.shape).astype(np.float32) * 0.05
    np.savez(out / "val.npz", clean=to_int16(clean), degraded=to_int16(degraded))
    (out / "val.json").write_text("[]")
    return out
