"""What the pipeline drives: the `Engine` protocol, and the engine that does all its work in this
process (`LocalEngine`: plans `cpu` and `cuda`).

An engine is composed, not inherited: `Branches` compute the guidance branches of a sampler step (in
torch, restore/engines/torch_branches.py, or MLX, restore/engines/mlx_branches.py); a `LocalEngine`
adds codec work on the same device; a `WorkerEngine` (restore/engines/worker_engine.py) wraps a
`LocalEngine` and moves the text-free branches and the codec work into a worker process, falling back
to the `LocalEngine` if the worker fails. `restore.engines.factory.build_engine` puts them together.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

from .trace import Tracer


@runtime_checkable
class Engine(Protocol):
    """Codec work behind handles (so that an engine with a worker can run it in idle time it declares)
    and the branch velocities of each sampler step. `warnings` collects what the user should know
    (a failed worker, a fallback), in the order they happened."""

    warnings: list[str]
    masks: bool  # whether begin_window takes frame groups: recordings that share a window kept apart

    def encode_async(self, wave: torch.Tensor, urgent: bool = False):
        """wave (rows, N) -> a handle for its latents (rows, T, D); `urgent`: nothing to overlap with."""

    def decode_async(self, latents: torch.Tensor):
        """latents (rows, T, D) -> a handle for the audio (rows, N)."""

    def result(self, handle) -> torch.Tensor:
        """The tensor behind a handle, waiting for it if need be."""

    def idle(self) -> None:
        """Declare that no branch work is due now (unguided steps, between windows)."""

    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None],
                     groups: torch.Tensor | None = None, guided: bool = True) -> None:
        """degraded (B, N) level-normalised audio, obs (B, T, D) its latents, one transcript per row;
        groups (B, T): where recordings share a window, which one each frame holds (0: silence), so
        that each attends only to itself and the silence (model.layers.group_mask); None: all one.
        guided: whether any step of the window runs the three branches. If not, only the sot rows'
        conditions are built, and nothing is started or measured for the u and so branches (no worker
        process, no sweep of the MLP share): the window's velocities are all unguided."""

    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]:
        """x (B, T, D) -> (v_u, v_so, v_sot) on guided steps, (v_sot,) on unguided ones; fp32."""

    def close(self) -> None:
        """Free what the engine holds (threads, a worker process, caches)."""


class Branches(Protocol):
    """The three guidance branches of one window, computed in this process."""

    warnings: list[str]
    share: float | None  # share of each sot MLP on the second engine (None: not split yet)
    masks: bool          # whether begin_window takes frame groups (Engine.begin_window)

    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None],
                     groups: torch.Tensor | None = None, guided: bool = True) -> None: ...

    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]: ...

    def so_conditions(self) -> np.ndarray:
        """(B, T, C) fp32: the so rows' projected conditions of the current window, for a worker."""

    def close(self) -> None: ...


class Done:
    """A codec job that already ran: its result is at hand."""

    def __init__(self, value: torch.Tensor):
        self.value = value


class LocalEngine:
    """Every branch and codec job in this process: codec work runs at once, on the branches' device."""

    def __init__(self, branches: Branches, codec, device: str | torch.device, tracer: Tracer | None = None):
        self.branches, self.codec = branches, codec
        self.device = torch.device(device)
        self.tracer = tracer or Tracer(enabled=False)
        self.warnings = branches.warnings  # one list: the branches' warnings and the engine's, in order
        self.masks = branches.masks

    @torch.inference_mode()
    def encode_async(self, wave: torch.Tensor, urgent: bool = False) -> Done:
        with self.tracer.span("encode", "main"):
            return Done(self.codec.encode(wave.to(self.device)))

    @torch.inference_mode()
    def decode_async(self, latents: torch.Tensor) -> Done:
        with self.tracer.span("decode", "main"):
            return Done(self.codec.decode(latents.to(self.device)))

    def result(self, handle: Done) -> torch.Tensor:
        return handle.value

    def idle(self) -> None:
        pass  # one engine: nothing waits for idle time

    def begin_window(self, degraded: torch.Tensor, obs: torch.Tensor, texts: list[str | None],
                     groups: torch.Tensor | None = None, guided: bool = True) -> None:
        self.branches.begin_window(degraded, obs, texts, groups, guided)

    def velocities(self, x: torch.Tensor, t: float, guided: bool) -> tuple[torch.Tensor, ...]:
        return self.branches.velocities(x, t, guided)

    def close(self) -> None:
        self.branches.close()
