"""The chunk worker's Core ML backend: so and u on the Neural Engine, in the worker process (Core ML's
predict holds the GIL, so it must not run in the process that drives MLX).

`CoreMLChunks(branches, config)` has TextFreeBranches' call interface (`null_cond`, `velocity`); the
pieces around the chunks (input projection, modulation, output head) are small and stay in torch. On first use for a model + window shape it exports the packages (coreml_export) into the on-disk
cache, compiles them to .mlmodelc once, checks with MLComputePlan where each op will run, and refuses
(raises PlacementError, so the worker fails and the main process takes the branches with a warning)
when real work would fall back off the Neural Engine, since Core ML would do so silently.

UNTESTED HERE: everything under "macOS only" below (compile_model, CompiledMLModel, predict and
MLComputePlan need macOS; 14.4+ for the compute plan). It is written against coremltools 9's documented
API. The logic around it (data flow, layouts, placement judgement, cache keys) is tested on Linux with
torch stand-ins for the compiled programs (tests/test_coreml.py).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..config import CodecConfig
from .coreml_export import batches_for, cache_key, cache_root, export
from .coreml_modules import compress, decompress

Predict = Callable[[dict], dict]  # Core ML's predict: {input name: fp16 array} -> {output name: array}

DEVICES = {"MLNeuralEngineComputeDevice": "ane", "MLCPUComputeDevice": "cpu", "MLGPUComputeDevice": "gpu"}
HEAVY_OPS = {"conv", "matmul", "einsum", "linear", "softmax"}  # off the engine, these cost real time
MAX_OFF_COST = 0.02  # share of the estimated cost allowed off the Neural Engine before refusing


class PlacementError(RuntimeError):
    pass


@dataclass
class Placement:
    """Where MLComputePlan says each op of one function will run."""
    function: str
    devices: dict[str, int] = field(default_factory=dict)  # device -> op count
    off: list[tuple[str, str, float]] = field(default_factory=list)  # (op, device, cost) not on the ANE

    @property
    def off_cost(self) -> float:
        return sum(cost for _, _, cost in self.off)

    def judge(self, max_off_cost: float = MAX_OFF_COST) -> tuple[str, str]:
        """('ok' | 'warn' | 'refuse', one line for the user)."""
        heavy = sorted({op for op, _, _ in self.off if op in HEAVY_OPS})
        where = ", ".join(f"{n} {d}" for d, n in sorted(self.devices.items()))
        if heavy or self.off_cost > max_off_cost:
            return "refuse", (f"{self.function}: {len(self.off)} ops off the Neural Engine ({where}; "
                              f"{self.off_cost:.0%} of the cost; heavy: {', '.join(heavy) or 'none'})")
        if self.off:
            ops = sorted({op for op, _, _ in self.off})
            return "warn", f"{self.function}: {len(self.off)} light ops off the Neural Engine ({', '.join(ops)})"
        return "ok", f"{self.function}: all {sum(self.devices.values())} ops on the Neural Engine"


def placement(plan, function: str) -> Placement:
    """Read an MLComputePlan (or anything shaped like one) for `function`, constants excluded."""
    result = Placement(function)

    def walk(block):
        for op in block.operations:
            yield op
            for inner in op.blocks:
                yield from walk(inner)

    for op in walk(plan.model_structure.program.functions[function].block):
        if op.operator_name == "const":
            continue
        usage = plan.get_compute_device_usage_for_mlprogram_operation(op)
        device = "unknown" if usage is None else DEVICES.get(type(usage.preferred_compute_device).__name__, "other")
        result.devices[device] = result.devices.get(device, 0) + 1
        if device != "ane":
            cost = plan.get_estimated_cost_for_mlprogram_operation(op)
            result.off.append((op.operator_name, device, 0.0 if cost is None else float(cost.weight)))
    return result


def settle(placements: list[Placement], policy: str | None = None) -> list[str]:
    """Refuse (raise) or return warnings. RESTORE_COREML_PLACEMENT=warn turns refusals into warnings."""
    policy = policy or os.environ.get("RESTORE_COREML_PLACEMENT", "refuse")
    verdicts = [p.judge() for p in placements]
    refused = [msg for v, msg in verdicts if v == "refuse"]
    if refused and policy != "warn":
        raise PlacementError("Core ML would run work off the Neural Engine: " + "; ".join(refused))
    return [msg for v, msg in verdicts if v != "ok"]


def export_folder(branches, config, codec: CodecConfig) -> Path:
    """The cache folder for this model + shape + settings, exported now if it is not there yet."""
    batches = batches_for(config.rows)
    key = cache_key(config.model_dir, frames=config.frames, batches=batches,
                    layers_per_chunk=config.layers_per_chunk, mlp_blocks=config.mlp_blocks)
    folder = cache_root() / key
    if not (folder / "manifest.json").is_file():
        export(branches, codec, config.frames, folder, batches)
    return folder


class CoreMLCodec:
    """The codec's interface (encode, decode) over the codec package's two functions."""

    def __init__(self, encode: Predict, decode: Predict, config: CodecConfig):
        self._encode, self._decode, self.config = encode, decode, config

    def encode(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, N) -> (B, T, 2 bins); the compression in fp32 here, outside the fp16 program."""
        spec = self._encode({"wave": np.ascontiguousarray(wave.numpy(), dtype=np.float16)})["spec"]
        return compress(torch.from_numpy(np.asarray(spec, dtype=np.float32)), self.config)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        spec = np.ascontiguousarray(decompress(latents, self.config).numpy(), dtype=np.float16)
        return torch.from_numpy(np.asarray(self._decode({"spec": spec})["wave"], dtype=np.float32))


class CoreMLChunks:
    def __init__(self, branches, config, predictors: list[Predict] | None = None,
                 codec_predictors: tuple[Predict, Predict] | None = None):
        """`predictors` (one per chunk) and `codec_predictors` stand in for the compiled programs in tests;
        by default they are loaded from the cache (macOS only)."""
        self.branches, self.null_cond, self.rows = branches, branches.null_cond, config.rows
        self.bounds = list(zip(branches.bounds, branches.bounds[1:]))
        codec_cfg = CodecConfig.from_dict(json.loads((Path(config.model_dir) / "config.json").read_text())["codec"])
        self.warnings: list[str] = []
        if predictors is None:
            folder = export_folder(branches, config, codec_cfg)
            predictors, codec_predictors, self.warnings = load_programs(folder, config.rows)
            for w in self.warnings:
                print(f"restore worker: warning: {w}", file=sys.stderr)
        self.chunks = predictors
        self.codec = CoreMLCodec(*codec_predictors, codec_cfg) if codec_predictors else None
        branches.chunks = torch.nn.ModuleList()  # Core ML holds the layer weights now: free the torch copies

    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond_h: torch.Tensor, cos=None, sin=None, mask=None
                 ) -> torch.Tensor:
        """x (B, T, D), t (B,), cond_h (B, T, C) -> velocity (B, T, D). cos/sin are baked into the programs;
        they take no attention mask (an engine with this worker does not pack files: `masks`)."""
        if mask is not None:
            raise ValueError("the Core ML chunks take no attention mask")
        br = self.branches
        mods, fmod = br.modulation(t)  # (B, layers, 6, C), (B, 2, C)
        b = x.shape[0]
        h = (br.x_in(x) + cond_h).transpose(1, 2).unsqueeze(2)  # (B, C, 1, T): the engine's layout
        h = np.ascontiguousarray(h.numpy(), dtype=np.float16)
        for (lo, hi), predict in zip(self.bounds, self.chunks):
            m = np.ascontiguousarray(mods[:, lo:hi].reshape(b, -1, 1, 1).numpy(), dtype=np.float16)
            h = predict({"h": h, "mods": m})["h_out"]
        h = torch.from_numpy(np.asarray(h, dtype=np.float32)).squeeze(2).transpose(1, 2)  # (B, T, C)
        shift, scale = fmod.unbind(1)
        return br.out(br.final_norm(h) * (1 + scale[:, None]) + shift[:, None])


# ---------------------------------------------------------------- macOS only (untested here)
def _compiled(package: Path) -> Path:
    """The package compiled once, next to it, per macOS version (a compiled model is OS specific)."""
    import coremltools as ct

    target = package.with_name(f"{package.stem}.macos{platform.mac_ver()[0]}.mlmodelc")
    if not target.exists():
        tmp = package.with_name(f".{target.name}.{os.getpid()}.mlmodelc")
        ct.models.utils.compile_model(str(package), str(tmp))
        os.replace(tmp, target)
    return target


def _placements(compiled: Path, functions: list[str]) -> list[Placement]:
    import coremltools as ct
    from coremltools.models.compute_plan import MLComputePlan

    plan = MLComputePlan.load_from_path(path=str(compiled), compute_units=ct.ComputeUnit.CPU_AND_NE)
    return [placement(plan, fn) for fn in functions]


def load_programs(folder: Path, rows: int) -> tuple[list[Predict], tuple[Predict, Predict], list[str]]:
    """Compile (cached), check placement, load for CPU_AND_NE; returns chunk and codec predictors."""
    import coremltools as ct

    manifest = json.loads((folder / "manifest.json").read_text())
    units = ct.ComputeUnit.CPU_AND_NE
    chunk_fn, enc_fn, dec_fn = f"b{rows}", f"encode_b{rows}", f"decode_b{rows}"
    if rows not in manifest["batches"]:
        raise RuntimeError(f"{folder}: exported for batches {manifest['batches']}, not {rows} rows")
    loaded: list[tuple[Path, list[str]]] = [(_compiled(folder / c["file"]), [chunk_fn]) for c in manifest["chunks"]]
    codec = _compiled(folder / manifest["codec"]["file"])
    warnings: list[str] = []
    try:
        found = [p for path, fns in loaded + [(codec, [enc_fn, dec_fn])] for p in _placements(path, fns)]
    except Exception as e:  # MLComputePlan needs macOS 14.4+
        warnings.append(f"could not read the Core ML compute plan ({type(e).__name__}: {e}); placement unchecked")
    else:
        (folder / "placement.json").write_text(json.dumps([p.__dict__ for p in found], indent=1))
        warnings += settle(found)
    load = lambda path, fn: ct.models.CompiledMLModel(str(path), compute_units=units, function_name=fn).predict
    chunks = [load(path, chunk_fn) for path, _ in loaded]
    return chunks, (load(codec, enc_fn), load(codec, dec_fn)), warnings
