"""Export the text-free branches and the codec as Core ML programs for the Neural Engine.

What is written (one folder per model + window shape + settings, see `cache_key`):
  chunk{i}.mlpackage  consecutive layers (coreml_modules.ANEChunk); a function b{n} per batch size n, all
                      sharing one weight file
  codec.mlpackage     functions encode_b{n} and decode_b{n} (the STFT's linear parts as DFT matmuls)
  manifest.json       shapes, layer bounds, weight bytes; written last, so its presence means complete

Batch sizes: 1 and 2 rows (a mono window, or a stereo window restored per channel; with one row, b2 could
also take so and u in one call), so one export serves both and the weights are stored once.

Every program is an fp16 ML program (fp16 inputs and outputs too: no casts at the boundary) of fixed
shape for ComputeUnit.CPU_AND_NE. `program_problems` lists anything the Neural Engine would refuse (a
non-fp16 value, rank > 4, a dynamic shape); export fails loudly on any, because Core ML would otherwise
run the program on the CPU without a word. Conversion runs on any OS; prediction needs macOS.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import platform
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from ..config import CodecConfig
from ..model.layers import rotary_tables
from .chunks import TextFreeBranches
from .coreml_modules import ANEChunk, ANEDecode, ANEEncode, pad_mlp_block

EXPORT_VERSION = 1
MIB = 1 << 20
SRAM_BYTES = 32 * MIB  # the Neural Engine's on-chip memory: measured throughput flattens past it
MAX_BLOCKS = 8         # more than 8 blocks did not help (measured)


class ExportError(RuntimeError):
    pass


def batches_for(rows: int) -> tuple[int, ...]:
    """The batch sizes to export for windows of `rows` channel rows."""
    return (1, 2) if rows <= 2 else (rows,)


def mlp_block_bytes(width: int, block: int, frames: int, rows: int = 1) -> int:
    """fp16 bytes live while one MLP block runs: its gate, up and down weights, plus the activations
    input (C) and output (C) and its gate and up products (block wide) over every position."""
    return 2 * (3 * width * block + rows * frames * (2 * width + 2 * block))


def mlp_blocks_for(width: int, intermediate: int, frames: int, rows: int = 1, sram: int = SRAM_BYTES) -> int:
    """The fewest blocks whose weights + activations fit the SRAM (more blocks cost dispatch)."""
    for n in range(1, MAX_BLOCKS + 1):
        if mlp_block_bytes(width, math.ceil(intermediate / n), frames, rows) <= sram:
            return n
    return MAX_BLOCKS  # the C-wide activations alone exceed it: partitioning further no longer helps


# ---------------------------------------------------------------- conversion and checks
def convert(module: torch.nn.Module, inputs: dict[str, tuple], output: str):
    """Export (torch.export, static shapes) and convert to an fp16 ML program for CPU_AND_NE; macOS 15 is
    the first target with multifunction packages."""
    import coremltools as ct

    examples = tuple(torch.randn(shape) for shape in inputs.values())
    with warnings.catch_warnings():  # torch.export and coremltools' frontend warn about their own internals
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        program = torch.export.export(module.eval(), examples).run_decompositions({})
        return ct.convert(program, convert_to="mlprogram",
                          inputs=[ct.TensorType(name=n, shape=s, dtype=np.float16) for n, s in inputs.items()],
                          outputs=[ct.TensorType(name=output, dtype=np.float16)],
                          compute_precision=ct.precision.FLOAT16, compute_units=ct.ComputeUnit.CPU_AND_NE,
                          minimum_deployment_target=ct.target.macOS15, skip_model_load=True)


def _operations(block):
    for op in block.operations:
        yield op
        for inner in op.blocks:
            yield from _operations(inner)


def program_problems(prog) -> list[str]:
    """What keeps a MIL program off the Neural Engine: float values that are not fp16, tensors of rank
    above 4, symbolic (dynamic) shapes, and non-constant ops computing integers (shape arithmetic).
    Integer and bool constants (axes, permutations, flags) are parameters, not data, and pass; so does
    the fp32 scalar `epsilon` attribute that the MIL spec gives `rsqrt` and `inverse`."""
    from coremltools.converters.mil.mil import types
    from coremltools.converters.mil.mil.types.symbolic import any_symbolic

    problems = []

    def epsilon_only(var) -> bool:
        return var.rank == 0 and all(name == "epsilon" for op in var.child_ops
                                     for name, v in op.inputs.items() if v is var)

    def check(where: str, var, const: bool) -> None:
        dtype = types.builtin_to_string(var.dtype)
        if types.is_float(var.dtype) and var.dtype != types.fp16 and not (const and epsilon_only(var)):
            problems.append(f"{where}: {dtype} value {var.name}")
        elif not types.is_float(var.dtype) and not const:
            problems.append(f"{where}: computes {dtype} ({var.name}), not fp16 data")
        if var.rank > 4:
            problems.append(f"{where}: rank {var.rank} > 4 ({var.name} {var.shape})")
        if var.rank > 0 and any_symbolic(var.shape):
            problems.append(f"{where}: dynamic shape {var.shape} ({var.name})")

    for fname, f in prog.functions.items():
        for name, var in f.inputs.items():
            check(f"{fname} input", var, const=False)
        for op in _operations(f):
            for out in op.outputs:
                check(f"{fname} {op.op_type}", out, const=op.op_type == "const")
    return problems


def weight_bytes(prog) -> int:
    """Bytes of float constants (weights, tables) in the program's functions, counted once per function."""
    from coremltools.converters.mil.mil import types

    total = 0
    for f in prog.functions.values():
        for op in _operations(f):
            if op.op_type == "const" and types.is_float(op.outputs[0].dtype) and op.outputs[0].rank > 0:
                total += int(np.asarray(op.outputs[0].val).nbytes)
    return total


def load_program(package: Path):
    """A saved package read back as a MIL program (every function), to check what was written."""
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto import load as milproto

    spec = ct.utils.load_spec(str(package))
    return milproto.load(spec, spec.specificationVersion, str(weight_file(package).parent))


def weight_file(package: Path) -> Path:
    return Path(package) / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"


def off_mib(nbytes: int, unit: int = MIB) -> bool:
    """False for an exact multiple of 1 MiB: on the M3 such a weight size streams 2-3x slower (measured)."""
    return nbytes % unit != 0


def save_functions(models: dict[str, object], path: Path, default: str) -> None:
    """Save converted single-function models as one multifunction package; save_multifunction
    deduplicates constants across functions, so functions of one chunk share one copy of its weights."""
    import coremltools as ct

    with tempfile.TemporaryDirectory() as tmp:
        desc = ct.utils.MultiFunctionDescriptor()
        for name, model in models.items():
            single = os.path.join(tmp, f"{name}.mlpackage")
            model.save(single)
            desc.add_function(single, "main", name)
        desc.default_function_name = default
        ct.utils.save_multifunction(desc, str(path))


def _check(package: Path) -> None:
    """Fail loudly on anything the Neural Engine would refuse, in the package as written."""
    problems = program_problems(load_program(package))
    if problems:
        raise ExportError(f"{package.name}: not Neural Engine safe: " + "; ".join(problems[:5]))


def export_chunk(chunk: ANEChunk, batches: list[int], frames: int, path: Path, unit: int = MIB) -> dict:
    """Convert one chunk for each batch size and save the multifunction package; if its weights come to an
    exact multiple of `unit`, pad an MLP block with a zero column (exact) and convert again."""
    c = chunk.layers[0].qkv_w.shape[1]
    shapes = lambda n: {"h": (n, c, 1, frames), "mods": (n, 6 * len(chunk.layers) * c, 1, 1)}
    for attempt in range(2):
        models = {f"b{n}": convert(chunk, shapes(n), "h_out") for n in batches}
        nbytes = weight_bytes(models[f"b{batches[0]}"]._mil_program)
        save_functions(models, path, f"b{batches[0]}")
        _check(path)
        blob = weight_file(path).stat().st_size
        if (off_mib(nbytes, unit) and off_mib(blob, unit)) or attempt:
            return {"functions": list(models), "weight_bytes": nbytes, "blob_bytes": blob, "padded": bool(attempt)}
        shutil.rmtree(path)
        pad_mlp_block(chunk.layers[-1])
    raise AssertionError("unreachable")


def export_codec(cfg: CodecConfig, frames: int, batches: list[int], path: Path, unit: int = MIB) -> dict:
    """Encode and decode for each batch size in one package (the DFT bases stored once), moved off a MiB
    multiple by a zero bias if need be."""
    n = frames * cfg.hop
    for pad in (False, True):
        models = {}
        for b in batches:
            models[f"encode_b{b}"] = convert(ANEEncode(cfg, frames, zero_bias=pad), {"wave": (b, n)}, "spec")
            models[f"decode_b{b}"] = convert(ANEDecode(cfg, frames), {"spec": (b, 2 * cfg.bins, 1, frames)}, "wave")
        nbytes = sum(weight_bytes(models[f"{k}_b{batches[0]}"]._mil_program) for k in ("encode", "decode"))
        save_functions(models, path, f"encode_b{batches[0]}")
        _check(path)
        blob = weight_file(path).stat().st_size
        if pad or (off_mib(nbytes, unit) and off_mib(blob, unit)):
            return {"functions": list(models), "weight_bytes": nbytes, "blob_bytes": blob, "padded": pad}
        shutil.rmtree(path)
    raise AssertionError("unreachable")


def export(branches: TextFreeBranches, codec: CodecConfig, frames: int, folder: str | Path,
           batches: tuple[int, ...] = (1, 2), unit: int = MIB) -> dict:
    """Write every package and the manifest into `folder` (built in a temporary sibling, then renamed,
    so a crash never leaves a half-written folder where the worker looks)."""
    folder = Path(folder)
    batches = list(batches)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        cos, sin = rotary_tables(frames, branches.head_dim, branches.rope_theta)
        bounds = list(zip(branches.bounds, branches.bounds[1:]))
        chunks = []
        for i, ((a, b), chunk) in enumerate(zip(bounds, branches.chunks)):
            ane = ANEChunk(chunk, branches.crosses[a:b], cos, sin)
            info = export_chunk(ane, batches, frames, tmp / f"chunk{i}.mlpackage", unit)
            chunks.append({"file": f"chunk{i}.mlpackage", "layers": [a, b], **info})
        codec_info = export_codec(codec, frames, batches, tmp / "codec.mlpackage", unit)
        manifest = {"export_version": EXPORT_VERSION, "frames": frames, "batches": batches,
                    "width": int(branches.x_in.weight.shape[0]), "chunks": chunks,
                    "codec": {"file": "codec.mlpackage", **codec_info}}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
        return manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- the on-disk cache
def cache_root() -> Path:
    """$RESTORE_CACHE, else ~/Library/Caches/restore on macOS, else $XDG_CACHE_HOME (~/.cache)/restore."""
    if os.environ.get("RESTORE_CACHE"):
        return Path(os.environ["RESTORE_CACHE"]) / "coreml"
    if platform.system() == "Darwin":
        return Path.home() / "Library" / "Caches" / "restore" / "coreml"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "restore" / "coreml"


def cache_key(model_dir: str | Path, **settings) -> str:
    """A hash of the model's files (config and weights, by content) and every setting that shapes the
    programs (frames, batches, chunking, blocks), plus the export and coremltools versions."""
    h = hashlib.sha256()
    model_dir = Path(model_dir)
    for path in [model_dir / "config.json", *sorted(model_dir.glob("model-*.safetensors"))]:
        h.update(path.name.encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    try:
        ct_version = importlib.metadata.version("coremltools")
    except importlib.metadata.PackageNotFoundError:
        ct_version = "none"
    h.update(json.dumps({**settings, "export": EXPORT_VERSION, "coremltools": ct_version}, sort_keys=True).encode())
    return h.hexdigest()[:20]
