"""The chunk worker: a separate process that runs the text-free branches (so, then u) of guided steps,
and codec work only in idle time that the main process declares.

Arrays cross the process boundary through shared memory allocated once per shape (fixed window
shapes), never as pickled copies; the pipe carries only small control messages. The backend here is
torch on the CPU; a Core ML backend runs the same chunks on the Neural Engine (coreml_runtime.py).

Protocol (main -> worker): ("window", grouped) the so conditions are in `cond` and, where `grouped`
(recordings sharing windows), each row's frame groups in `groups` (model.layers.group_mask); ("step", t) x is in `x`, reply
("stepped", events) with v_so, v_u in `v`; ("encode", job) / ("decode", job) queue codec work on the
`enc_*` / `dec_*` slots, reply ("encoded"|"decoded", job, events) once it ran; ("idle",) run queued
codec work until a new message arrives; ("stop",).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections import deque
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from multiprocessing import shared_memory

import numpy as np

from .trace import now_us


@dataclass(frozen=True)
class WorkerConfig:
    model_dir: str
    rows: int            # channel rows per window
    frames: int          # latent frames per window (T)
    samples: int         # audio samples per window (N)
    latent_dim: int      # D
    width: int           # C
    threads: int = 1
    backend: str = "torch"
    layers_per_chunk: int = 4
    mlp_blocks: int = 2
    guard: bool = True


def _shapes(c: WorkerConfig) -> dict[str, tuple]:
    return {"x": (c.rows, c.frames, c.latent_dim), "cond": (c.rows, c.frames, c.width), "groups": (c.rows, c.frames),
            "v": (2, c.rows, c.frames, c.latent_dim), "enc_wave": (c.rows, c.samples),
            "enc_lat": (c.rows, c.frames, c.latent_dim), "dec_lat": (c.rows, c.frames, c.latent_dim),
            "dec_wave": (c.rows, c.samples)}


class SharedArrays:
    """Named float32 arrays in shared memory; the creator unlinks them."""

    def __init__(self, shapes: dict[str, tuple], names: dict[str, str] | None = None):
        self.owner = names is None
        self.blocks, self.arrays = {}, {}
        for key, shape in shapes.items():
            size = int(np.prod(shape)) * 4
            shm = (shared_memory.SharedMemory(create=True, size=size) if self.owner
                   else shared_memory.SharedMemory(name=names[key]))
            self.blocks[key] = shm
            self.arrays[key] = np.ndarray(shape, dtype=np.float32, buffer=shm.buf)

    def names(self) -> dict[str, str]:
        return {k: b.name for k, b in self.blocks.items()}

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def close(self) -> None:
        self.arrays.clear()
        for b in self.blocks.values():
            try:
                b.close()
                if self.owner:
                    b.unlink()
            except (FileNotFoundError, BufferError):
                pass
        self.blocks.clear()


# ---------------------------------------------------------------- worker side
def _build_backend(c: WorkerConfig):
    """-> (velocity(x, t, cond) for so and u, encode(wave), decode(latents)) as torch callables."""
    import torch

    from .. import weights
    from ..codec import build_codec
    from ..model.layers import rotary_tables
    from .chunks import TextFreeBranches

    files = weights.load(c.model_dir)
    model = weights.build_model(files)
    branches = TextFreeBranches(model, c.layers_per_chunk, c.mlp_blocks, c.guard).eval()
    del model  # the original blocks (attention and unpartitioned MLP weights) are freed here
    codec = build_codec(files.codec)
    cos, sin = rotary_tables(c.frames, files.model.head_dim, files.model.rope_theta)
    if c.backend == "coreml":
        from .coreml_runtime import CoreMLChunks
        branches = CoreMLChunks(branches, c)  # same call interface, chunks on the Neural Engine
        codec = branches.codec or codec  # the codec as Core ML programs when exported (same interface)
    return branches, codec, cos, sin


def worker_main(conn, config: dict, names: dict[str, str]) -> None:
    import torch

    c = WorkerConfig(**config)
    torch.set_num_threads(c.threads)
    arrays = SharedArrays(_shapes(c), names)
    try:
        branches, codec, cos, sin = _build_backend(c)
        conn.send(("ready", os.getpid()))
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    from ..model.layers import group_mask

    cond = mask = None
    queue: deque = deque()

    def run_codec(job):
        kind, jid = job[0], job[1]
        start = now_us()
        with torch.inference_mode():
            if kind == "encode":
                arrays["enc_lat"][:] = codec.encode(torch.from_numpy(arrays["enc_wave"])).numpy()
            else:
                arrays["dec_wave"][:] = codec.decode(torch.from_numpy(arrays["dec_lat"])).numpy()
        event = {"name": kind, "track": "worker", "ts": start, "dur": now_us() - start}
        conn.send((kind + "d", jid, [event]))

    try:
        while True:
            msg = conn.recv()
            kind = msg[0]
            if kind == "step":
                t = torch.full((c.rows,), msg[1])
                events = []
                with torch.inference_mode():
                    x = torch.from_numpy(arrays["x"].copy())
                    for i, (name, cond_h) in enumerate((("so", cond), ("u", None))):
                        start = now_us()
                        if cond_h is None:
                            cond_h = branches.null_cond.expand(c.rows, c.frames, -1)
                        arrays["v"][i] = branches.velocity(x, t, cond_h, cos, sin, mask).numpy()
                        events.append({"name": name, "track": "worker", "ts": start, "dur": now_us() - start})
                conn.send(("stepped", events))
            elif kind == "window":
                cond = torch.from_numpy(arrays["cond"].copy())
                mask = group_mask(torch.from_numpy(arrays["groups"]).long()) if msg[1] else None
            elif kind in ("encode", "decode"):
                queue.append(msg)
                if msg[2]:  # urgent: nothing to overlap with, run at once
                    run_codec(queue.pop())
            elif kind == "idle":
                while queue and not conn.poll():
                    run_codec(queue.popleft())
            elif kind == "stop":
                return
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return
    finally:
        arrays.close()


# ---------------------------------------------------------------- main side
class WorkerFailure(RuntimeError):
    pass


class WorkerClient:
    """The main process's handle on a worker. Every wait has a timeout; any failure raises
    WorkerFailure and leaves the client dead (the caller falls back to its own engine)."""

    def __init__(self, config: WorkerConfig, tracer=None, start_timeout: float = 300.0, step_timeout: float = 120.0):
        self.config, self.tracer = config, tracer
        self.step_timeout = step_timeout
        self.arrays = SharedArrays(_shapes(config))
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, asdict(config), self.arrays.names()),
                                   daemon=True, name="restore-worker")
        self.process.start()
        child.close()
        self.alive = True
        self.done: dict[int, str] = {}   # finished codec jobs: id -> kind
        self.next_job = 0
        self.ready_timeout = start_timeout
        self.ready = False

    # -- plumbing
    def _send(self, *msg) -> None:
        if not self.alive:
            raise WorkerFailure("worker is not running")
        try:
            self.conn.send(msg)
        except (BrokenPipeError, OSError) as e:
            self._fail(f"worker pipe broke ({e})")

    def _recv(self, timeout: float):
        try:
            if not self.conn.poll(timeout):
                self._fail(f"worker did not answer within {timeout:.0f} s")
            msg = self.conn.recv()
        except (EOFError, BrokenPipeError, OSError) as e:
            self._fail(f"worker exited ({type(e).__name__})")
        if msg[0] == "error":
            self._fail("worker failed: " + msg[1].strip().splitlines()[-1])
        if msg[0] in ("encoded", "decoded"):
            self.done[msg[1]] = msg[0]
            self._trace(msg[2])
        return msg

    def _fail(self, why: str):
        self.close(kill=True)
        raise WorkerFailure(why)

    def _trace(self, events):
        if self.tracer is not None:
            self.tracer.add(events)

    def wait_ready(self) -> None:
        if self.ready:
            return
        what = ("starting the Neural Engine worker (its first run converts and compiles the model's programs: "
                "minutes)" if self.config.backend == "coreml" else "starting the worker process")
        with (self.tracer.phase(what) if self.tracer is not None else nullcontext()):
            while not self.ready:
                msg = self._recv(self.ready_timeout)
                self.ready = msg[0] == "ready"

    # -- branches
    def window(self, cond_so: np.ndarray, groups: np.ndarray | None = None) -> None:
        """The next window's so conditions (rows, T, C), and its frame groups (rows, T) or None."""
        self.wait_ready()
        self.arrays["cond"][:] = cond_so
        if groups is not None:
            self.arrays["groups"][:] = groups
        self._send("window", groups is not None)

    def step_begin(self, x: np.ndarray, t: float) -> None:
        self.arrays["x"][:] = x
        self._send("step", float(t))

    def step_end(self) -> tuple[np.ndarray, np.ndarray]:
        while True:
            msg = self._recv(self.step_timeout)
            if msg[0] == "stepped":
                self._trace(msg[1])
                return self.arrays["v"][0].copy(), self.arrays["v"][1].copy()

    # -- codec in declared idle time
    def submit(self, kind: str, data: np.ndarray, urgent: bool = False) -> int:
        slot = "enc_wave" if kind == "encode" else "dec_lat"
        self.arrays[slot][:] = data
        jid = self.next_job
        self.next_job += 1
        self._send(kind, jid, urgent)
        return jid

    def idle(self) -> None:
        """Declare the worker's engine idle: queued codec work may run now."""
        self._send("idle")

    def result(self, jid: int) -> np.ndarray:
        """The finished job's output (declares idle time and waits if it has not run yet)."""
        if jid not in self.done:
            self.wait_ready()
            self.idle()
        while jid not in self.done:
            self._recv(self.step_timeout)
        kind = self.done.pop(jid)
        return (self.arrays["enc_lat"] if kind == "encoded" else self.arrays["dec_wave"]).copy()

    def poll(self) -> None:
        """Collect finished-job notices without waiting."""
        while self.alive and self.conn.poll(0):
            self._recv(0)

    def close(self, kill: bool = False) -> None:
        if not self.alive:
            return
        self.alive = False
        try:
            if not kill:
                self.conn.send(("stop",))
                self.process.join(5)
        except (BrokenPipeError, OSError):
            pass
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()
        self.arrays.close()
