"""Engines and plans.

An engine evaluates the velocity of the guidance branches for one window at a time. A plan is data:
which engine runs which branch and where codec work runs. Plans are chosen per machine (`auto`) and
can be overridden from the command line.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Protocol

import torch

PLANS = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Plan:
    name: str
    device: str          # torch device of the main engine
    dtype: torch.dtype   # compute dtype of the main engine's GEMMs


class Engine(Protocol):
    """Per window: `begin_window`, then `velocities` once per sampler step."""

    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None]) -> None: ...

    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]:
        """x (B, T, D) -> (v_u, v_so, v_sot) on guided steps, (v_sot,) on unguided ones."""
        ...


def resolve_plan(name: str = "auto", device: str = "auto") -> Plan:
    """`auto` picks the fastest plan this machine supports."""
    if name not in PLANS:
        raise ValueError(f"unknown plan {name!r}; choose one of {', '.join(PLANS)}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "auto":
        name = "cuda" if device.startswith("cuda") else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("plan 'cuda' needs a CUDA GPU, and torch sees none")
        return Plan("cuda", device if device.startswith("cuda") else "cuda", torch.bfloat16)
    return Plan("cpu", "cpu", torch.float32)


def machine() -> str:
    return f"{platform.system()} {platform.machine()}"
