import json

import pytest
import torch

from restore import weights
from restore.config import CodecConfig, ModelConfig
from restore.errors import InputError, UsageError
from restore.model.dit import DiT
from tests.conftest import TINY_MODEL


def tiny():
    cfg = ModelConfig.from_dict(TINY_MODEL)
    return cfg, CodecConfig(scale=3.0), DiT(cfg, CodecConfig(scale=3.0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_round_trip(tmp_path, dtype):
    cfg, codec, model = tiny()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    weights.save(tmp_path, cfg, codec, model.state_dict(), {"note": "test"}, dtype=dtype)
    files = weights.load(tmp_path)
    assert files.model == cfg and files.codec == codec and files.info == {"note": "test"}
    loaded = weights.build_model(files)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        tol = 1e-3 if dtype == torch.float16 else 0
        assert torch.allclose(a, b, atol=tol, rtol=tol), name


def test_shards_stay_under_the_limit(tmp_path, monkeypatch):
    cfg, codec, model = tiny()
    monkeypatch.setattr(weights, "SHARD_BYTES", 64 * 1024)
    paths = weights.save(tmp_path, cfg, codec, model.state_dict())
    assert len(paths) > 2
    assert all(p.stat().st_size < 64 * 1024 + 16 * 1024 for p in paths)  # + header; one big tensor may exceed
    weights.build_model(weights.load(tmp_path))


def test_version_and_mismatch_errors(tmp_path):
    cfg, codec, model = tiny()
    weights.save(tmp_path, cfg, codec, model.state_dict())
    config = json.loads((tmp_path / "config.json").read_text())
    config["format_version"] = 99
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="format version 99"):
        weights.load(tmp_path)
    config["format_version"] = weights.FORMAT_VERSION
    config["model"]["width"] = 128
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="do not match"):
        weights.build_model(weights.load(tmp_path))
    with pytest.raises(InputError, match="not a model folder"):
        weights.load(tmp_path / "nowhere")


def test_the_model_is_found_in_a_documented_order(tmp_path, monkeypatch):
    monkeypatch.delenv(weights.MODEL_ENV, raising=False)
    assert weights.find_model() in weights.SHIPPED_MODELS  # installed with the package, or in the checkout
    monkeypatch.setenv(weights.MODEL_ENV, str(tmp_path / "env"))
    assert weights.find_model() == tmp_path / "env"
    assert weights.find_model(tmp_path / "given") == tmp_path / "given"  # --model wins
    monkeypatch.setattr(weights, "SHIPPED_MODELS", (tmp_path / "none",))
    monkeypatch.delenv(weights.MODEL_ENV)
    with pytest.raises(InputError, match="RESTORE_MODEL"):
        weights.find_model()


def test_shipped_default_model_loads():
    files = weights.load()
    assert files.codec.sample_rate == 16000
    # trained weights, with their provenance: the whole lineage's steps, and each averaged source's own run
    assert files.info.get("total_train_steps", 0) > 0
    for source in files.info.get("averaged", []):
        assert source["run"] and source["train_steps"] > 0 and 0 < source["share"] < 1
    model = weights.build_model(files)
    assert sum(p.numel() for p in model.parameters()) == files.info["parameters"]


def test_model_sampler_presets_apply_under_the_callers_settings(tmp_path, wav):
    from restore.options import RestoreOptions
    from restore.pipeline.restorer import Restorer

    cfg, codec, model = tiny()
    weights.save(tmp_path / "m", cfg, codec, model.state_dict(),
                 samplers={"flash": {"steps": 1, "churn": 0.1, "strength": 0.7}})
    files = weights.load(tmp_path / "m")
    assert files.samplers == {"flash": {"steps": 1, "churn": 0.1, "strength": 0.7}}
    sampler = lambda **o: RestoreOptions(**o).resolve(files.samplers)[0]  # noqa: E731
    flash = sampler(sampler="flash")
    assert (flash.steps, flash.churn, flash.w_so) == (1, 0.1, 1.5)
    assert RestoreOptions(sampler="flash").resolve(files.samplers)[1].strength == 0.7  # post-processing too
    assert sampler(sampler="flash", steps=3).steps == 3  # --steps wins
    assert sampler(sampler="pro").steps == 32  # other presets untouched
    # a guidance weight that no step would use is refused, not silently ignored
    with pytest.raises(UsageError, match="no effect"):
        sampler(sampler="flash", guidance=2.0)
    assert sampler(sampler="flash", steps=2, guidance=2.0).w_t == 2.0

    seen = []
    Restorer(tmp_path / "m", plan="cpu").restore_file(wav("in.wav", 1.0), tmp_path / "out.wav", sampler="flash",
                                                      progress=lambda p: seen.append(p.steps))
    assert seen and set(seen) == {1}


@pytest.mark.parametrize("samplers", [{"turbo": {"steps": 1}}, {"flash": {"stepz": 1}}, {"pro": {"name": "x"}}])
def test_unknown_sampler_presets_are_refused(tmp_path, samplers):
    cfg, codec, model = tiny()
    weights.save(tmp_path, cfg, codec, model.state_dict(), samplers=samplers)
    with pytest.raises(InputError, match="samplers"):
        weights.load(tmp_path)


@pytest.mark.parametrize("source", [{"source": "silence"}, {"source": "observation", "source_sigma": 0.0}])
def test_an_unknown_flow_source_is_refused_on_loading(tmp_path, source):
    cfg, codec, model = tiny()
    weights.save(tmp_path, cfg, codec, model.state_dict())
    config = json.loads((tmp_path / "config.json").read_text())
    config["model"].update(source)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="flow source"):
        weights.load(tmp_path)
