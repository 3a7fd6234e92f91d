"""Growth: a deeper or wider model that computes exactly what a trained one does, to train on from there.

Depth (`deepen`):

Each trunk block adds its three sub-layers' outputs to the residual stream (self-attention through
`attn.o_proj`, cross-attention through `cross.o_proj`, the MLP through `mlp.down_proj`). A copy of a
trained block with those three projections zeroed adds nothing, so inserting copies leaves the
network's function unchanged, and training starts from where the shallower model stopped: the copies'
output projections get gradients at once, the rest of each copy as soon as those move. Copies go after
blocks spread evenly over the depth (8 -> 12 layers: after blocks 1, 3, 5 and 7).

The 8-layer trunk is 54 ms of a 32-window training step on the H200 and 12 layers 74 ms: more depth
costs steps, so it is a bet on capacity, to be measured side by side against the shallower model
continued (docs/training.md).
"""

from __future__ import annotations

import dataclasses
import math
import re

import torch

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


_SHIFTS = (0, 3)  # the chunks of a block's modulation (shift, scale, gate) x (attention, MLP) added after a norm
_GATES = (2, 5)


def widen(files: weights.ModelFiles, new_width: int, new_intermediate: int | None = None,
          seed: int = 0, std: float = 0.02) -> weights.ModelFiles:
    """`files` with a trunk of `new_width` channels (heads of the same size, so `new_width` a multiple of
    it) and an MLP of `new_intermediate` units (default: the same ratio to the width, rounded to 64)."""
    cfg = files.model
    w, hd = cfg.width, cfg.head_dim
    if new_width <= w or new_width % hd:
        raise InputError(f"the trunk is {w} wide in heads of {hd}: widening needs a larger multiple of {hd} "
                         f"(got {new_width})")
    inter_old = cfg.intermediate
    inter = new_intermediate or 64 * round(inter_old * new_width / w / 64)
    if inter < inter_old:
        raise InputError(f"the MLP has {inter_old} units: widening cannot shrink it (got {inter})")
    W, k = new_width, math.sqrt(new_width / w)  # the norms' outputs on the old channels grow by k
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # each layer's mean gate size at t = 1, the new channels' gates (so they can move)
        mod, _ = weights.build_model(files).modulation(torch.ones(1))
        gate_size = {i: (mod[0] + files.state[f"blocks.{i}.ada"].float())[list(_GATES)].abs().mean(1)
                     for i in range(cfg.layers)}

    def grown(t: torch.Tensor, rows: int | None, cols: int | None, reads: bool = False) -> torch.Tensor:
        """t enlarged to (rows, cols) (None: that axis kept): the old block in place, new columns random
        where they read new channels (`reads`), everything else zero."""
        t = t.float()
        shape = (rows or t.shape[0],) + ((cols or t.shape[1],) if t.ndim == 2 else ())
        out = torch.zeros(shape)
        if reads and t.ndim == 2:
            out[:, t.shape[1]:] = torch.randn(shape[0], shape[1] - t.shape[1], generator=g) * std
        out[tuple(slice(0, n) for n in t.shape)] = t
        return out

    def chunked(t: torch.Tensor, chunks: int, scaled: tuple[int, ...], reads: bool) -> torch.Tensor:
        """A modulation layer's (chunks * w, ...) output rows regrouped as chunks * W; chunks in `scaled`
        (shifts after a norm) multiplied by k."""
        parts = []
        for j, part in enumerate(t.float().chunk(chunks, dim=0)):
            part = grown(part, W, W if t.ndim == 2 else None, reads)
            parts.append(part * k if j in scaled else part)
        return torch.cat(parts)

    def heads_rows(t: torch.Tensor, cols: int | None) -> torch.Tensor:
        """q/k/v weights of attention: old heads' rows kept (their reads of the norm's output divided by k
        when cols is W), new heads' rows random."""
        t = t.float()
        out = torch.randn(W, cols or t.shape[1], generator=g) * std
        out[:w, : t.shape[1]] = t / k if cols else t
        return out

    state = {}
    for name, t in files.state.items():
        m = _BLOCK.fullmatch(name)
        part = m.group(2) if m else name
        if m is None:
            if name in ("x_in.weight", "x_in.bias", "c_in.weight", "c_in.bias", "null_cond",
                        "time_mlp.0.weight", "time_mlp.0.bias", "time_mlp.2.bias"):
                new = grown(t, W, None)          # writes into new channels: zero
            elif name == "time_mlp.2.weight":
                new = grown(t, W, W, reads=True)
            elif name in ("mod.weight", "mod.bias"):
                new = chunked(t, 6, _SHIFTS, reads=True)
            elif name in ("final_mod.weight", "final_mod.bias"):
                new = chunked(t, 2, (0,), reads=True)
            elif name == "out.weight":           # reads the final norm
                new = grown(t / k, None, W, reads=True)
            else:
                new = t.float()                  # encoders, text, observation skip, output bias
        elif part == "ada":
            new = torch.zeros(6, W)
            new[:, :w] = t.float()
            new[list(_SHIFTS), :w] *= k
            new[list(_GATES), w:] = gate_size[int(m.group(1))][:, None]
        elif part in ("attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight", "cross.q_proj.weight"):
            new = heads_rows(t, W)
        elif part in ("cross.k_proj.weight", "cross.v_proj.weight"):  # read the text states, not the trunk
            new = heads_rows(t, None)
        elif part.endswith("_proj.bias"):
            new = grown(t, W, None)
        elif part in ("attn.o_proj.weight", "cross.o_proj.weight"):
            new = grown(t, W, W)                 # new heads not added, new channels not written
        elif part == "cross_norm.weight":
            new = torch.ones(W)
            new[:w] = t.float()
        elif part in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
            new = torch.randn(inter, W, generator=g) * std
            new[:inter_old, :w] = t.float() / k
        elif part == "mlp.down_proj.weight":
            new = grown(t, W, inter)
        else:
            raise InputError(f"{name}: a parameter this growth does not know")
        state[name] = new  # float32: the scaled weights keep the function exactly
    model = dataclasses.replace(cfg, width=W, heads=W // hd, intermediate=inter)
    info = {**files.info, "widened": {"from_width": w, "width": W, "from_intermediate": inter_old,
                                      "intermediate": inter}}
    return weights.ModelFiles(model, files.codec, state, info, dict(files.samplers))
