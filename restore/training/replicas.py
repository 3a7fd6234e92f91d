"""Data-parallel training: one process per GPU, each with its own data stream, the gradients averaged
every step, so that N GPUs train one model N times as many windows per second (the lent machine's
device time is what it is held, whatever its size).

Started by torchrun, which sets RANK, LOCAL_RANK and WORLD_SIZE; without them this is one replica and
every method is the identity. The processes agree on one clock (rank 0's, shared at the steps the
trainer asks), so that each one decides the same learning rate, checkpoint and stop at the same step:
replicas that disagreed would wait on each other forever or drift apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Replicas:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls, device: str) -> "Replicas":
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return cls()
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        if not dist.is_initialized():
            if device.startswith("cuda"):
                torch.cuda.set_device(local)
            dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        return cls(rank, world, local)

    @property
    def lead(self) -> bool:
        """The replica that validates, logs, checkpoints and exports."""
        return self.rank == 0

    def device(self, device: str) -> str:
        """`cuda` becomes this replica's GPU; other devices are shared."""
        return f"cuda:{self.local_rank}" if self.world > 1 and device == "cuda" else device

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        """Every replica starts from rank 0's weights."""
        if self.world > 1:
            for p in module.parameters():
                dist.broadcast(p.data, 0)

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Replace each gradient by its mean over the replicas, in one all-reduce. A parameter that got
        no gradient here (text dropped from this replica's whole batch) counts as zero, as in the others'
        mean."""
        if self.world == 1:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        flat = torch._utils._flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        flat /= self.world
        for g, mean in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
            g.copy_(mean)

    def agree(self, value: float) -> float:
        """Rank 0's value, on every replica (a synchronisation: call it at the same step on all)."""
        if self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, 0)
        return box[0]

    def gather(self, obj) -> list:
        """Every replica's object, in rank order, on every replica."""
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def check_identical(self, module: torch.nn.Module) -> None:
        """Raise if the replicas' weights differ: they must stay equal to the bit."""
        if self.world == 1:
            return
        with torch.no_grad():
            sums = [float(p.double().sum()) for p in module.parameters()]
        seen = self.gather(sums)
        if any(s != seen[0] for s in seen[1:]):
            raise RuntimeError(f"replica weights differ (rank 0 against the others): {[s[:3] for s in seen]}")

    def close(self) -> None:
        """Leave together: a replica that left while rank 0 still exported could take the launcher, and rank
        0 with it, down first (seen on the CPU: torchrun stops every replica when one exits badly)."""
        if self.world > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
