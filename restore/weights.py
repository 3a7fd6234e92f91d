"""Model files: a folder with `config.json` (carrying a format version) and safetensors shards.

`config.json` may also carry `samplers`: this model's overrides of the pro/flash presets and of the
post-processing (e.g. a model whose one-step estimate beats longer sampling sets {"flash": {"steps": 1}});
the user's options still win.

Weights are stored under the parameter names of the PyTorch reference; every backend uses the same
names. Loading is offline and renames nothing.

Which model a restoration uses (`find_model`): the one given (`--model`), else the folder named by the
RESTORE_MODEL environment variable, else the shipped model: installed with the package (the wheel
carries assets/model as restore/assets/model), or in a source checkout's assets/model.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from .config import SAMPLER_PRESETS, CodecConfig, ModelConfig, PostConfig, SamplerConfig
from .errors import InputError, option
from .sampling.source import check_source

FORMAT_VERSION = 1
SHARD_BYTES = 15 * 1024 * 1024  # under 16 MiB: the limit of files that come back from the GPU machine
MODEL_ENV = "RESTORE_MODEL"
SHIPPED_MODELS = (Path(__file__).resolve().parent / "assets" / "model",          # installed package
                  Path(__file__).resolve().parent.parent / "assets" / "model")   # source checkout


def find_model(model: str | Path | None = None) -> Path:
    """The model folder to use: `model`, else $RESTORE_MODEL, else the shipped model."""
    if model is not None:
        return Path(model)
    if os.environ.get(MODEL_ENV):
        return Path(os.environ[MODEL_ENV])
    for folder in SHIPPED_MODELS:
        if (folder / "config.json").is_file():
            return folder
    raise InputError(f"no model given and none shipped at {SHIPPED_MODELS[0]}; pass {option('model')} (a model "
                     f"folder) or set {MODEL_ENV}")


@dataclass
class ModelFiles:
    model: ModelConfig
    codec: CodecConfig
    state: dict[str, torch.Tensor]
    info: dict[str, Any] = field(default_factory=dict)  # provenance: data, steps, metrics
    samplers: dict[str, dict[str, Any]] = field(default_factory=dict)  # this model's overrides of the presets


def save_shards(folder: Path, prefix: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> list[Path]:
    """`tensors` in name order as `{prefix}-0001-of-000N.safetensors` files of at most SHARD_BYTES each (a
    tensor larger than that gets a file of its own); the folder's old files of that prefix are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{prefix}-*.safetensors"):
        old.unlink()
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    paths = []
    for i, shard in enumerate(shards):
        p = folder / f"{prefix}-{i + 1:04d}-of-{len(shards):04d}.safetensors"
        save_file(shard, str(p), metadata=metadata)
        paths.append(p)
    return paths


def save(folder: str | Path, model: ModelConfig, codec: CodecConfig, state: dict[str, torch.Tensor],
         info: dict[str, Any] | None = None, dtype: torch.dtype = torch.float16,
         samplers: dict[str, dict[str, Any]] | None = None) -> list[Path]:
    folder = Path(folder)
    state = {name: t.detach().to("cpu", dtype if t.is_floating_point() else t.dtype) for name, t in state.items()}
    paths = save_shards(folder, "model", state, {"format_version": str(FORMAT_VERSION)})
    config = {"format_version": FORMAT_VERSION, "model": model.to_dict(), "codec": codec.to_dict(),
              "info": info or {}}
    if samplers:
        config["samplers"] = samplers
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return paths


def load(folder: str | Path | None = None) -> ModelFiles:
    """The model folder's configuration and weights (default: `find_model()`), checked."""
    folder = find_model(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise InputError(f"{folder}: not a model folder (no config.json)")
    config = json.loads(cfg_path.read_text())
    version = config.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(f"{folder}: model format version {version!r} is not supported (this build reads "
                         f"version {FORMAT_VERSION})")
    shards = sorted(folder.glob("model-*.safetensors"))
    if not shards:
        raise InputError(f"{folder}: no weight files (model-*.safetensors)")
    state: dict[str, torch.Tensor] = {}
    for p in shards:
        state.update(load_file(str(p)))
    samplers = config.get("samplers", {})
    settings = {f.name for c in (SamplerConfig, PostConfig) for f in dataclasses.fields(c)} - {"name"}
    for name, overrides in samplers.items():
        unknown = sorted(set(overrides) - settings)
        if name not in SAMPLER_PRESETS or unknown:
            raise InputError(f"{folder}: config.json 'samplers' has an unknown sampler or setting "
                             f"({name!r}: {unknown})")
        if not 0 <= overrides.get("mix_first", 0) <= 1:
            raise InputError(f"{folder}: config.json 'samplers' {name!r}: mix_first must be between 0 and 1, "
                             f"got {overrides['mix_first']}")
    model = ModelConfig.from_dict(config.get("model"))
    try:
        check_source(model.source, model.source_sigma)
    except ValueError as e:
        raise InputError(f"{folder}: config.json 'model': {e}") from None
    return ModelFiles(model, CodecConfig.from_dict(config.get("codec")), state, config.get("info", {}), samplers)


def build_model(files: ModelFiles, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """The PyTorch reference DiT with the weights loaded (strict: every name must match)."""
    from .model.dit import DiT

    model = DiT(files.model, files.codec)
    try:
        missing, unexpected = model.load_state_dict({k: v.float() for k, v in files.state.items()}, strict=False)
    except RuntimeError as e:  # shape mismatch: config.json and the weights disagree
        raise InputError(f"model weights do not match the architecture in config.json ({str(e).splitlines()[1].strip()})") from None
    if missing or unexpected:
        raise InputError(f"model weights do not match the architecture: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return model.to(device=device, dtype=dtype).eval()


def build_skip(files: ModelFiles, device: str | torch.device = "cpu"):
    """The observation skip (fp32, a few kB) for models that have one, else None. Built from the weights
    alone, so that plans whose engines hold their own copy of the network need no torch model."""
    if files.model.precondition != "obs_skip":
        return None
    from .model.precondition import ObsSkip

    skip = ObsSkip(files.codec.latent_dim, source=files.model.source, source_sigma=files.model.source_sigma,
                  local=files.model.skip_local)
    prefix = "skip."
    try:
        skip.load_state_dict({k[len(prefix):]: v.float() for k, v in files.state.items() if k.startswith(prefix)})
    except RuntimeError as e:
        raise InputError(f"model weights lack the observation skip that config.json declares ({e})") from None
    return skip.to(device).eval().requires_grad_(False)
