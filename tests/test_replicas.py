"""Data-parallel replicas on the CPU (gloo): the gradients are averaged, rank 0's clock and values reach
every replica, and two replicas started by torchrun train one model, logged, checkpointed and exported
once, with their own data streams, resumable by as many replicas and refused by another number."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from restore.training.replicas import Replicas
from tests.conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _replica(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    rep = Replicas.from_env("cpu")
    a = torch.nn.Parameter(torch.zeros(3))
    b = torch.nn.Parameter(torch.zeros(2, 2))
    a.grad = torch.full((3,), float(rank + 1))  # 1 and 2: mean 1.5
    if rank == 1:
        b.grad = torch.full((2, 2), 4.0)        # rank 0 has none: mean 2
    rep.average_gradients([a, b])
    result = {"a": a.grad.tolist(), "b": b.grad.tolist(), "agreed": rep.agree(10.0 + rank),
              "gathered": rep.gather(rank * 7), "lead": rep.lead}
    m = torch.nn.Linear(2, 2)
    torch.manual_seed(rank)  # different weights on each rank until rank 0's are broadcast
    m.reset_parameters()
    rep.broadcast_parameters(m)
    rep.check_identical(m)
    with torch.no_grad():
        m.weight.add_(rank)
    try:
        rep.check_identical(m)
        result["mismatch_caught"] = False
    except RuntimeError:
        result["mismatch_caught"] = True
    Path(out, f"{rank}.json").write_text(json.dumps(result))
    rep.close()


@pytest.mark.slow
def test_replicas_average_agree_gather_and_check(tmp_path):
    mp.spawn(_replica, args=(free_port(), str(tmp_path)), nprocs=2)
    r0, r1 = (json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1))
    for r in (r0, r1):
        assert r["a"] == [1.5] * 3 and r["b"] == [[2.0, 2.0], [2.0, 2.0]]
        assert r["agreed"] == 10.0 and r["gathered"] == [0, 7] and r["mismatch_caught"]
    assert r0["lead"] and not r1["lead"]


def test_one_replica_is_the_identity(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    rep = Replicas.from_env("cuda")
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.full((2,), 3.0)
    rep.average_gradients([p])
    assert rep.world == 1 and rep.lead and rep.device("cuda") == "cuda"
    assert p.grad.tolist() == [3.0, 3.0] and rep.agree(1.5) == 1.5 and rep.gather("x") == ["x"]


def train(data, out, nproc, minutes, *extra):
    config = json.dumps({"model": TINY_MODEL, "train": {"batch": 2, "window_seconds": 4.096, "warmup": 2,
                                                        "log_every": 2, "val_every": 1000}})
    script = [str(ROOT / "scripts/train.py"), "--data", str(data), "--out", str(out), "--device", "cpu",
              "--minutes", str(minutes), "--config", config, *extra]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(launcher + script, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
def test_two_replicas_train_one_model_and_resume(train_data_dir, tmp_path):
    out = tmp_path / "run"
    done = train(train_data_dir, out, 2, 0.05)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("exported") == 1  # rank 0 alone exports
    lines = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert lines[0]["event"] == "start" and lines[0]["replicas"] == 2
    steps = [x["step"] for x in lines if "loss" in x]
    assert steps and steps == sorted(set(steps))  # one log, not one per replica
    state = torch.load(out / "ckpt.pt", weights_only=False)
    assert len(state["replicas"]) == 1  # rank 1's data stream, beside rank 0's
    assert state["replicas"][0]["batches"] != state["batches"]  # each replica draws its own windows
    assert (out / "export" / "config.json").exists()

    again = train(train_data_dir, out, 2, 0.02, "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count(f"resumed at step {state['step']}") == 2
    assert torch.load(out / "ckpt.pt", weights_only=False)["step"] > state["step"]

    alone = train(train_data_dir, out, 1, 0.02, "--resume")
    assert alone.returncode != 0 and "saved by 2 replica(s), resumed by 1" in alone.stderr
