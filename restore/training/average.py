"""Weight averaging: runs continued from the same weights, averaged parameter by parameter.

Two runs that start from one model and differ only in their data settings stay close enough in weight
space that their mean is a model too, sometimes one with the strengths of both (a run with undamaged
windows and one without, in the shipped model's line: docs/training.md). The mean is taken in float32
and stored as the exports are (`restore.weights.save`, float16 shards).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from .. import weights
from ..errors import InputError


def average(folders: Sequence[str | Path], shares: Sequence[float] | None = None) -> weights.ModelFiles:
    """The share-weighted mean of the models in `folders` (equal shares by default).

    The models must have one architecture, codec and parameter set; `shares` must be positive and sum
    to 1. The result carries the first model's samplers and, in its info, the entries all the models
    agree on (parameter count, training settings they share) and where each share came from.
    """
    if len(folders) < 2:
        raise InputError("averaging needs at least two models")
    shares = [1.0 / len(folders)] * len(folders) if shares is None else [float(s) for s in shares]
    if len(shares) != len(folders) or min(shares) <= 0 or abs(sum(shares) - 1.0) > 1e-6:
        raise InputError(f"shares must be one positive number per model, summing to 1 (got {shares})")
    models = [weights.load(f) for f in folders]
    first = models[0]
    for folder, m in zip(folders[1:], models[1:]):
        if m.model != first.model or m.codec != first.codec:
            raise InputError(f"{folder}: another architecture or codec than {folders[0]}; only runs of one "
                             f"model can be averaged")
        if m.state.keys() != first.state.keys() or any(m.state[k].shape != first.state[k].shape for k in m.state):
            raise InputError(f"{folder}: other parameters than {folders[0]}")
    state = {}
    for name, t in first.state.items():
        if not t.is_floating_point():
            if any(not torch.equal(m.state[name], t) for m in models[1:]):
                raise InputError(f"integer parameter {name!r} differs between the models; it cannot be averaged")
            state[name] = t
            continue
        state[name] = sum(s * m.state[name].float() for s, m in zip(shares, models))
    sources: list[dict[str, Any]] = [{"folder": str(f), "share": s, "run": m.info.get("run"),
                                      "train_steps": m.info.get("train_steps"),
                                      "total_train_steps": m.info.get("total_train_steps")}
                                     for f, s, m in zip(folders, shares, models)]
    common = {k: v for k, v in first.info.items() if all(m.info.get(k) == v for m in models[1:])}
    return weights.ModelFiles(first.model, first.codec, state, {**common, "averaged": sources}, dict(first.samplers))


def save_average(folders: Sequence[str | Path], out: str | Path, shares: Sequence[float] | None = None,
                 info: dict[str, Any] | None = None) -> list[Path]:
    """Average `folders` into the model folder `out`; `info` is added to the recorded provenance."""
    files = average(folders, shares)
    return weights.save(out, files.model, files.codec, files.state, {**files.info, **(info or {})},
                        samplers=files.samplers or None)
