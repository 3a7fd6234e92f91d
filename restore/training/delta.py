"""A trained model as its move from the model it started from, in 8 bits: how a run's weights come back
from the GPU machine in one call.

That machine returns at most 64 MiB a call and is given back 30 s after a call ends. The 12-layer model
is 107 MB in float16, so fetching it took two calls, and a run was lost when the second came too late.
A run continued from a model moves each weight by a small fraction of its size; that move, quantised to
int8 per row (each row's scale its largest move / 127), is half the bytes of the model and comes back
within half a step of each row's scale (`unpack` reports the bound): for the shipped model's 20-minute
continuation, an error of 1% of the move (RMS), and restorations 62-64 dB apart from the run's own.

A packed folder holds `delta.json` (the trained model's config.json and a checksum of the start's
weights, so that it is never unpacked onto another start) and `delta-*.safetensors`: for each
floating-point tensor `NAME.q` (int8) and `NAME.scale` (float32, one per row), and `NAME.raw` for the
others, kept as they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from .. import weights
from ..config import CodecConfig, ModelConfig
from ..errors import InputError

PACK_VERSION = 1
LEVELS = 127


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """sha256 over the names, shapes, dtypes and bytes of `state`, in name order."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1) if t.dim() > 1 else t.reshape(1, -1)


def pack(model: str | Path, init: str | Path, out: str | Path) -> list[Path]:
    """Write the move of `model` from `init` (both model folders of one architecture) to the folder `out`."""
    new, start = weights.load(model), weights.load(init)
    _check_same(new, start, model, init)
    tensors: dict[str, torch.Tensor] = {}
    for name, t in new.state.items():
        if not t.is_floating_point():
            tensors[f"{name}.raw"] = t
            continue
        move = _rows(t.float() - start.state[name].float())
        scale = move.abs().amax(1) / LEVELS
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        tensors[f"{name}.q"] = torch.round(move / safe[:, None]).clamp(-LEVELS, LEVELS).to(torch.int8)
        tensors[f"{name}.scale"] = scale
    out = Path(out)
    paths = weights.save_shards(out, "delta", tensors, {"pack_version": str(PACK_VERSION)})
    config = json.loads((weights.find_model(model) / "config.json").read_text())
    record = {"pack_version": PACK_VERSION, "init_checksum": state_checksum(start.state),
              "dtypes": {name: str(t.dtype).removeprefix("torch.") for name, t in new.state.items()},
              "config": config}
    (out / "delta.json").write_text(json.dumps(record, indent=2) + "\n")
    return paths + [out / "delta.json"]


def unpack(packed: str | Path, init: str | Path, out: str | Path) -> dict[str, Any]:
    """Rebuild the packed model onto `init` as the model folder `out`. Returns the number of tensors and
    the bound on any weight's error from the quantisation (`max_error`: half the largest step)."""
    packed = Path(packed)
    meta_path = packed / "delta.json"
    if not meta_path.is_file():
        raise InputError(f"{packed}: not a packed model (no delta.json)")
    meta = json.loads(meta_path.read_text())
    if meta.get("pack_version") != PACK_VERSION:
        raise InputError(f"{packed}: pack version {meta.get('pack_version')!r} is not supported (this build reads "
                         f"version {PACK_VERSION})")
    start = weights.load(init)
    if state_checksum(start.state) != meta["init_checksum"]:
        raise InputError(f"{packed} was packed against other starting weights than {init}; unpack it onto the "
                         f"model the run was started from")
    tensors: dict[str, torch.Tensor] = {}
    shards = sorted(packed.glob("delta-*.safetensors"))
    for p in shards:
        tensors.update(load_file(str(p)))
    state: dict[str, torch.Tensor] = {}
    step = 0.0
    for name, dtype in meta["dtypes"].items():
        if f"{name}.raw" in tensors:
            state[name] = tensors[f"{name}.raw"]
            continue
        if f"{name}.q" not in tensors or name not in start.state:
            raise InputError(f"{packed}: {name} is missing (an incomplete copy?)")
        base = start.state[name].float()
        scale = tensors[f"{name}.scale"]
        move = (tensors[f"{name}.q"].float() * scale[:, None]).reshape(base.shape)
        state[name] = (base + move).to(getattr(torch, dtype))
        step = max(step, float(scale.max()))
    config = meta["config"]
    dtypes = {t.dtype for t in state.values() if t.is_floating_point()}
    weights.save(out, ModelConfig.from_dict(config.get("model")), CodecConfig.from_dict(config.get("codec")), state, config.get("info", {}),
                 dtype=dtypes.pop() if len(dtypes) == 1 else torch.float32, samplers=config.get("samplers"))
    return {"tensors": len(state), "max_error": step / 2}


def _check_same(a: weights.ModelFiles, b: weights.ModelFiles, fa, fb) -> None:
    # where the flow starts (model.source) and how the skip bounds its variance (skip_local) shape no
    # weight: a run continued into a bridge or onto a local skip packs, and unpacks with its own config
    same_flow = dataclasses.replace(a.model, source=b.model.source, source_sigma=b.model.source_sigma,
                                    skip_local=b.model.skip_local)
    if same_flow != b.model or a.codec != b.codec:
        raise InputError(f"{fa} and {fb} have different architectures or codecs: a move between them cannot be packed")
    if a.state.keys() != b.state.keys() or any(a.state[k].shape != b.state[k].shape for k in a.state):
        raise InputError(f"{fa} and {fb} have different parameters: a move between them cannot be packed")
