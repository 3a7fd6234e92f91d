"""Core ML export on Linux: the converted torch modules match the reference, the written programs are fp16
with rank <= 4 and static shapes, functions share weights, blobs move off MiB multiples, and the worker
backend's logic (data flow, placement judgement, cache) works. Core ML *prediction* needs macOS and is
not run here; the tests that need it stand in torch modules for the compiled programs and say so."""

import numpy as np
import pytest
import torch

ct = pytest.importorskip("coremltools")

from restore import weights  # noqa: E402
from restore.codec import STFTCodec  # noqa: E402
from restore.config import CodecConfig, ModelConfig  # noqa: E402
from restore.engines import coreml_export as ce  # noqa: E402
from restore.engines import coreml_runtime as cr  # noqa: E402
from restore.engines.chunks import TextFreeBranches  # noqa: E402
from restore.engines.coreml_modules import (ANEChunk, ANEDecode, ANEEncode, compress, decompress,  # noqa: E402
                                            pad_mlp_block)
from restore.engines.worker import WorkerConfig  # noqa: E402
from restore.model.dit import DiT  # noqa: E402
from restore.model.layers import rotary_tables  # noqa: E402

T = 32
CODEC = CodecConfig(scale=3.0)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({"width": 64, "layers": 2, "heads": 2, "intermediate": 160,
                                 "encoder": {"width": 32, "layers": 1, "out_dim": 32},
                                 "text": {"width": 32, "layers": 1, "heads": 2}})
    model = DiT(cfg, CODEC)
    for p in model.parameters():  # away from the zero init, so the branches compute something
        torch.nn.init.normal_(p, std=0.05)
    folder = tmp_path_factory.mktemp("coreml_model")
    weights.save(folder, cfg, CODEC, model.state_dict(), dtype=torch.float32)
    return folder


@pytest.fixture(scope="module")
def branches(model_dir):
    return TextFreeBranches(weights.build_model(weights.load(model_dir)), layers_per_chunk=2, mlp_blocks=2).eval()


def ane_chunks(branches):
    cos, sin = rotary_tables(T, branches.head_dim, branches.rope_theta)
    return [ANEChunk(c, branches.crosses[a:b], cos, sin).eval()
            for (a, b), c in zip(zip(branches.bounds, branches.bounds[1:]), branches.chunks)]


@pytest.fixture(scope="module")
def exported(branches, tmp_path_factory):
    folder = tmp_path_factory.mktemp("export") / "programs"
    return folder, ce.export(branches, CODEC, T, folder, batches=(1, 2))


@torch.no_grad()
def test_converted_modules_match_the_reference(branches):
    """The (B, C, 1, S) rewrite with 1x1 convolutions and guards, in fp32: exact up to rounding."""
    cos, sin = rotary_tables(T, branches.head_dim, branches.rope_theta)
    h = torch.randn(2, T, 64)
    mods, _ = branches.modulation(torch.tensor([0.4, 0.4]))
    (a, b), chunk = (branches.bounds[0], branches.bounds[1]), branches.chunks[0]
    want = chunk(h, mods[:, a:b], branches.crosses[a:b], cos, sin)
    got = ane_chunks(branches)[0](h.transpose(1, 2).unsqueeze(2), mods[:, a:b].reshape(2, -1, 1, 1))
    assert rel(got.squeeze(2).transpose(1, 2), want) < 1e-5
    codec, wave = STFTCodec(CODEC), torch.randn(2, T * 256) * 0.05
    lat = compress(ANEEncode(CODEC, T)(wave), CODEC)
    assert rel(lat, codec.encode(wave)) < 1e-5
    assert rel(ANEDecode(CODEC, T)(decompress(lat, CODEC)), codec.decode(lat)) < 1e-5


@pytest.mark.slow
def test_written_programs_are_neural_engine_safe(exported):
    """Read back from disk: every function of every package is fp16 with rank <= 4 and static shapes."""
    folder, manifest = exported
    from coremltools.converters.mil.mil import types
    for entry in manifest["chunks"] + [manifest["codec"]]:
        prog = ce.load_program(folder / entry["file"])
        assert sorted(prog.functions) == sorted(entry["functions"])
        assert ce.program_problems(prog) == []
        ops = [op for f in prog.functions.values() for op in f.operations if op.op_type != "const"]
        assert ops and all(out.dtype == types.fp16 and out.rank <= 4 for op in ops for out in op.outputs)
        assert not any(op.op_type == "cast" for op in ops)  # fp16 in and out: nothing to cast at the boundary
    chunk = ce.load_program(folder / "chunk0.mlpackage").functions
    assert chunk["b1"].inputs["h"].shape == (1, 64, 1, T) and chunk["b2"].inputs["h"].shape == (2, 64, 1, T)


def test_problems_are_reported():
    class Bad(torch.nn.Module):
        def forward(self, x):
            return (x.reshape(1, 2, 2, 2, 2) * 2.0).reshape(1, 16)  # a rank-5 intermediate
    problems = ce.program_problems(ce.convert(Bad(), {"x": (1, 16)}, "y")._mil_program)
    assert any("rank 5" in p for p in problems)


@pytest.mark.slow
def test_functions_share_one_weight_file(exported):
    """One function per batch size (mono; stereo per channel), the weights stored once per package."""
    folder, manifest = exported
    c, codec = manifest["chunks"][0], manifest["codec"]
    assert c["functions"] == ["b1", "b2"]
    assert codec["functions"] == ["encode_b1", "decode_b1", "encode_b2", "decode_b2"]
    for entry in (c, codec):  # weight_bytes: one batch size's functions; the blob holds all of them
        assert entry["blob_bytes"] < 1.2 * entry["weight_bytes"]
    assert [f.name for f in ct.utils.load_spec(str(folder / c["file"])).description.functions] == ["b1", "b2"]


@pytest.mark.slow
def test_blob_padding_moves_weights_off_the_unit(branches, exported, tmp_path):
    plain = exported[1]["chunks"][0]["weight_bytes"]  # the same chunk, unpadded
    info = ce.export_chunk(ane_chunks(branches)[0], [1], T, tmp_path / "c.mlpackage", unit=plain)  # as if 1 MiB
    assert info["padded"] and info["weight_bytes"] % plain != 0
    assert ce.off_mib(3 * 2**20 + 2) and not ce.off_mib(3 * 2**20)
    layer = ane_chunks(branches)[0].layers[0]
    x = torch.randn(1, 64, 1, T)
    before = layer.mlp(x)
    pad_mlp_block(layer)
    assert torch.equal(layer.mlp(x), before) or rel(layer.mlp(x), before) < 1e-7  # a zero column adds nothing


def test_mlp_blocks_fit_the_sram():
    assert ce.mlp_blocks_for(512, 1344, 1875) == 1  # the shipped model's shape: 17 MB with activations
    assert ce.mlp_blocks_for(384, 1024, 1875) == 1  # width 384: 13 MB
    n = ce.mlp_blocks_for(1024, 8192, 1875)
    assert 1 < n <= ce.MAX_BLOCKS and ce.mlp_block_bytes(1024, -(-8192 // n), 1875) <= ce.SRAM_BYTES
    assert ce.mlp_block_bytes(1024, -(-8192 // (n - 1)), 1875) > ce.SRAM_BYTES  # the fewest that fit


def test_cache_key_and_folder(model_dir, tmp_path, monkeypatch):
    k = ce.cache_key(model_dir, frames=T, rows=1)
    assert k == ce.cache_key(model_dir, frames=T, rows=1) != ce.cache_key(model_dir, frames=T + 1, rows=1)
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in model_dir.iterdir():
        copy.joinpath(p.name).write_bytes(p.read_bytes())
    assert ce.cache_key(copy, frames=T, rows=1) == k  # content, not path
    shard = next(copy.glob("model-*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    assert ce.cache_key(copy, frames=T, rows=1) != k
    monkeypatch.setenv("RESTORE_CACHE", str(tmp_path / "cache"))
    assert ce.cache_root() == tmp_path / "cache" / "coreml"


# ---- the worker backend, with torch stand-ins for the compiled programs (Core ML predicts only on macOS)
def stand_in(module, inp, out):
    """A predict function with Core ML's boundary: fp16 arrays in and out, computed by `module`."""
    def predict(feeds):
        args = [torch.from_numpy(np.asarray(feeds[k], dtype=np.float32)) for k in inp]
        with torch.no_grad():
            return {out: module(*args).numpy().astype(np.float16)}
    return predict


@torch.no_grad()
def test_coreml_chunks_data_flow(model_dir, branches):
    ref = TextFreeBranches(weights.build_model(weights.load(model_dir)), layers_per_chunk=2, mlp_blocks=2).eval()
    config = WorkerConfig(str(model_dir), 1, T, T * 256, 514, 64, backend="coreml", layers_per_chunk=2)
    predictors = [stand_in(c, ["h", "mods"], "h_out") for c in ane_chunks(ref)]
    codec_p = (stand_in(ANEEncode(CODEC, T), ["wave"], "spec"), stand_in(ANEDecode(CODEC, T), ["spec"], "wave"))
    backend = cr.CoreMLChunks(TextFreeBranches(weights.build_model(weights.load(model_dir)), 2, 2).eval(), config,
                              predictors, codec_p)
    x, t = torch.randn(1, T, 514), torch.tensor([0.7])
    cos, sin = rotary_tables(T, ref.head_dim, ref.rope_theta)
    for cond in (torch.randn(1, T, 64) * 0.5, ref.null_cond.expand(1, T, -1)):  # so, then u: one graph
        assert rel(backend.velocity(x, t, cond, cos, sin), ref.velocity(x, t, cond, cos, sin)) < 5e-3  # fp16 I/O
    assert len(backend.branches.chunks) == 0  # the worker's torch copies of the layer weights were freed
    wave, codec = torch.randn(1, T * 256) * 0.05, STFTCodec(CODEC)
    assert rel(backend.codec.encode(wave), codec.encode(wave)) < 5e-3
    lat = codec.encode(wave)
    assert rel(backend.codec.decode(lat), codec.decode(lat)) < 5e-3


class MLNeuralEngineComputeDevice:  # named as coremltools' device classes: placement() goes by the name
    pass


class MLCPUComputeDevice:
    pass


class FakePlan:
    """The shape of coremltools' MLComputePlan: model_structure.program.functions[f].block.operations."""

    def __init__(self, ops):
        from types import SimpleNamespace as NS
        self.ops = {id(o): (dev, cost) for o, dev, cost in ops}
        block = NS(operations=[o for o, _, _ in ops])
        self.model_structure = NS(program=NS(functions={"b1": NS(block=block)}))

    def get_compute_device_usage_for_mlprogram_operation(self, op):
        from types import SimpleNamespace as NS
        return NS(preferred_compute_device=self.ops[id(op)][0](), supported_compute_devices=[])

    def get_estimated_cost_for_mlprogram_operation(self, op):
        from types import SimpleNamespace as NS
        return NS(weight=self.ops[id(op)][1])


def op(name):
    from types import SimpleNamespace as NS
    return NS(operator_name=name, blocks=[])


def test_placement_is_judged():
    ane, cpu = MLNeuralEngineComputeDevice, MLCPUComputeDevice
    good = cr.placement(FakePlan([(op("const"), cpu, 0.0), (op("conv"), ane, 0.9), (op("softmax"), ane, 0.1)]), "b1")
    assert good.devices == {"ane": 2} and good.judge()[0] == "ok"
    light = cr.placement(FakePlan([(op("conv"), ane, 0.99), (op("reshape"), cpu, 0.005)]), "b1")
    assert light.judge()[0] == "warn" and cr.settle([light]) == [light.judge()[1]]
    heavy = cr.placement(FakePlan([(op("conv"), ane, 0.5), (op("matmul"), cpu, 0.5)]), "b1")
    assert heavy.judge()[0] == "refuse" and "matmul" in heavy.judge()[1]
    with pytest.raises(cr.PlacementError):
        cr.settle([good, heavy])
    assert cr.settle([heavy], policy="warn") == [heavy.judge()[1]]


def test_export_folder_is_cached(model_dir, branches, tmp_path, monkeypatch):
    monkeypatch.setenv("RESTORE_CACHE", str(tmp_path))
    calls = []

    def fake_export(br, codec, frames, folder, batches):
        calls.append((folder, batches))
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text("{}")
    monkeypatch.setattr(cr, "export", fake_export)
    config = lambda rows: WorkerConfig(str(model_dir), rows, T, T * 256, 514, 64, backend="coreml")
    first = cr.export_folder(branches, config(1), CODEC)
    assert cr.export_folder(branches, config(1), CODEC) == first and calls == [(first, (1, 2))]
    assert cr.export_folder(branches, config(2), CODEC) == first  # stereo uses the b2 functions of that export
    assert cr.export_folder(branches, config(3), CODEC) != first and calls[-1][1] == (3,)
    assert first.parent == tmp_path / "coreml"
