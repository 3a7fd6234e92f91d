"""Depth growth: a deeper model that computes exactly what a trained one does, to train on from there.

Each trunk block adds its three sub-layers' outputs to the residual stream (self-attention through
`attn.o_proj`, cross-attention through `cross.o_proj`, the MLP through `mlp.down_proj`). A copy of a
trained block with those three projections zeroed adds nothing, so inserting copies leaves the
network's function unchanged, and training starts from where the shallower model stopped: the copies'
output projections get gradients at once, the rest of each copy as soon as those move. Copies go after
blocks spread evenly over the depth (8 -> 12 layers: after blocks 1, 3, 5 and 7).

The 8-layer trunk is 54 ms of a 32-window training step on the H200 and 12 layers 74 ms
(`docs/bench/h200/train_step/`): more depth costs steps, so it is a bet on capacity, measured side by
side against the shallower model continued (docs/training.md).
"""

from __future__ import annotations

import dataclasses
import re

from .. import weights
from ..errors import InputError

ZEROED = ("attn.o_proj.weight", "cross.o_proj.weight", "mlp.down_proj.weight")  # what a block adds
_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")


def copy_after(layers: int, new_layers: int) -> list[int]:
    """For each block to insert, the block it copies and follows: spread evenly over the depth, the
    last block always among them; a block can be copied more than once when the depth more than doubles."""
    extra = new_layers - layers
    return [((j + 1) * layers + extra - 1) // extra - 1 for j in range(extra)]


def deepen(files: weights.ModelFiles, new_layers: int) -> weights.ModelFiles:
    """`files` with `new_layers` trunk blocks: the old ones in order, each followed by its zero-output
    copies (`copy_after`). The info records the growth; everything else is kept."""
    old = files.model.layers
    if new_layers <= old:
        raise InputError(f"the model has {old} layers already; growing needs more (got {new_layers})")
    blocks: list[dict[str, object]] = [{} for _ in range(old)]
    state = {}
    for name, t in files.state.items():
        m = _BLOCK.fullmatch(name)
        if m is None:
            state[name] = t
        else:
            blocks[int(m.group(1))][m.group(2)] = t
    missing = [p for p in ZEROED if p not in blocks[0]]
    if missing:
        raise InputError(f"block 0 has no {missing}: not the trunk this growth knows")
    after = copy_after(old, new_layers)
    order: list[tuple[int, bool]] = []  # (source block, is a zero-output copy)
    for i in range(old):
        order.append((i, False))
        order.extend((i, True) for _ in range(after.count(i)))
    for new, (src, copy) in enumerate(order):
        for part, t in blocks[src].items():
            state[f"blocks.{new}.{part}"] = t.clone().zero_() if copy and part in ZEROED else t.clone()
    info = {**files.info, "grown": {"from_layers": old, "layers": new_layers, "copied_after": after}}
    return weights.ModelFiles(dataclasses.replace(files.model, layers=new_layers), files.codec, state, info,
                              dict(files.samplers))
