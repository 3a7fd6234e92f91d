"""Training batches: one maker that assembles windows and degrades them, and the producers that run it
beside the training step (in line, in a thread, or in a process of its own).

Every batch travels with the maker's random state after it was made, so a checkpoint taken after
step n restarts the producer at batch n + 1 exactly, whichever producer ran and however far ahead it was.
"""

from __future__ import annotations

import queue
import threading
import traceback
from dataclasses import dataclass, field
from typing import Iterator

import torch

from .. import text as text_mod
from .data import TrainingData
from .degrade import DegradeConfig, Degrader

LEVEL_RMS = 0.05  # degraded input is normalised to this RMS; the codec scale assumes it
PRODUCERS = ("inline", "thread", "process")


def level_normalise(clean: torch.Tensor, degraded: torch.Tensor, lengths: torch.Tensor):
    """Scale each pair so that the degraded content has RMS LEVEL_RMS (as the pipeline does)."""
    rms = (degraded.square().sum(-1) / lengths.clamp_min(1)).sqrt().clamp_min(1e-5)
    g = (LEVEL_RMS / rms)[:, None]
    return clean * g, degraded * g


@dataclass(frozen=True)
class BatchSpec:
    """All a maker needs, picklable, so that another process can build the same maker."""
    data_dir: str
    device: str
    window: int                 # samples
    sample_rate: int
    hop: int                    # codec hop: the frame mask
    max_tokens: int
    batch: int
    p_uncond: float
    p_drop_text: float
    pad_text: bool              # pad transcripts to max_tokens (a fixed shape for torch.compile)
    floor_db: float = 0.0
    seed: int = 0
    degrade: DegradeConfig = field(default_factory=DegradeConfig)


Batch = tuple  # (clean, degraded, use_cond, ids, mask, frame_mask)


class BatchMaker:
    """Random training windows (data.py), degraded (degrade.py), level-normalised, with condition and
    transcript dropout drawn: one batch per call, a function of the spec and the random state alone."""

    def __init__(self, spec: BatchSpec):
        self.spec = spec
        self.device = torch.device(spec.device)
        self.data = TrainingData(spec.data_dir, self.device, spec.window, spec.sample_rate, seed=spec.seed,
                                 floor_db=spec.floor_db)
        self.degrader = Degrader(spec.degrade, self.data.noises, self.data.rirs, self.data.noise_names,
                                 self.data.rir_names)
        self.gen = torch.Generator().manual_seed(spec.seed + 1)  # degradation parameters (CPU)

    def state(self) -> dict:
        return {"gen": self.gen.get_state(), "rng": self.data.rng.getstate()}

    def set_state(self, state: dict) -> None:
        self.gen.set_state(state["gen"])
        self.data.rng.setstate(state["rng"])

    def __call__(self) -> Batch:
        s = self.spec
        clean, target, texts, lengths = self.data.window_batch(s.batch)
        degraded, _ = self.degrader(clean, self.gen)
        keep = torch.arange(s.window, device=self.device)[None] < lengths[:, None]
        degraded = degraded * keep  # the pipeline zero-pads the degraded input, so padding stays silent
        clean, degraded = level_normalise(target, degraded, lengths)
        use_cond = torch.rand(s.batch, generator=self.gen) >= s.p_uncond
        keep_text = torch.rand(s.batch, generator=self.gen) >= s.p_drop_text
        texts = [t if (t and use_cond[i] and keep_text[i]) else None for i, t in enumerate(texts)]
        ids, mask = text_mod.batch(texts, s.max_tokens, self.device)
        if s.pad_text:
            pad = s.max_tokens - ids.shape[1]
            ids = torch.nn.functional.pad(ids, (0, pad), value=text_mod.PAD_ID)
            mask = torch.nn.functional.pad(mask, (0, pad), value=False)
        frames = (lengths + s.hop - 1) // s.hop
        frame_mask = torch.arange(s.window // s.hop, device=self.device)[None] < frames[:, None]
        return clean, degraded, use_cond.to(self.device), ids, mask, frame_mask


def batches(maker: BatchMaker, producer: str, depth: int = 3) -> Iterator[tuple[Batch, dict]]:
    """(batch, the maker's state after it) for ever, from the maker's current state on."""
    if producer == "inline":
        return _inline(maker)
    if producer == "thread":
        return _thread(maker, depth)
    if producer == "process":
        return _process(maker.spec, maker.state(), depth)
    raise ValueError(f"unknown producer {producer!r}: choose one of {', '.join(PRODUCERS)}")


def _inline(maker: BatchMaker) -> Iterator[tuple[Batch, dict]]:
    while True:
        b = maker()
        yield b, maker.state()


def _thread(maker: BatchMaker, depth: int) -> Iterator[tuple[Batch, dict]]:
    """Built ahead in a background thread (on its own CUDA stream on a GPU), overlapping the step. It
    shares the interpreter with the step, so its Python holds the step's kernel launches back."""
    cuda = maker.device.type == "cuda"
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce():
        try:
            stream = torch.cuda.Stream(maker.device) if cuda else None
            with torch.cuda.stream(stream):  # no stream: the current one
                while not stop.is_set():
                    b = maker()
                    if cuda:
                        stream.synchronize()
                    q.put((b, maker.state()))
        except BaseException as e:  # surface the producer's failure in the training loop
            q.put(e)

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if isinstance(item, BaseException):
                raise item
            b, state = item
            if cuda:
                for t in b:
                    if isinstance(t, torch.Tensor) and t.is_cuda:
                        t.record_stream(torch.cuda.current_stream(maker.device))  # keep memory until used
            yield b, state
    finally:
        stop.set()
        _drain(q)


def _process(spec: BatchSpec, state: dict, depth: int) -> Iterator[tuple[Batch, dict]]:
    """Built ahead in a process of its own (its own interpreter and CUDA context on the same device), so
    that its Python runs beside the step's instead of taking turns with it. On a GPU the batches come
    over CUDA IPC and are copied at once into this process's memory, on a side stream that waits for
    nothing else, so that the producer may reuse its buffers as soon as the copy is done."""
    ctx = torch.multiprocessing.get_context("spawn")
    q = ctx.Queue(maxsize=depth)
    stop = ctx.Event()
    proc = ctx.Process(target=_produce, args=(spec, state, q, stop, torch.get_num_threads()), daemon=True,
                       name="restore-batches")
    proc.start()
    device = torch.device(spec.device)
    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    try:
        while True:
            try:
                item = q.get(timeout=5.0)
            except queue.Empty:
                if proc.is_alive():
                    continue
                try:  # it may have said why just before it ended
                    item = q.get(timeout=1.0)
                except queue.Empty:
                    raise RuntimeError(f"the batch producer process died (exit code {proc.exitcode})") from None
            if isinstance(item, str):
                raise RuntimeError(f"the batch producer process failed:\n{item}")
            b, st = item
            del item  # hold the producer's memory no longer than the copy below
            if side is not None:
                with torch.cuda.stream(side):
                    own = tuple(t.clone() if isinstance(t, torch.Tensor) and t.is_cuda else t for t in b)
                side.synchronize()
                for t in own:
                    if isinstance(t, torch.Tensor) and t.is_cuda:
                        t.record_stream(torch.cuda.current_stream(device))
                del b
                b = own
            yield b, st
    finally:
        stop.set()
        _drain(q)
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)


def _produce(spec: BatchSpec, state: dict, q, stop, threads: int) -> None:
    """The producer process: the same maker, started from the trainer's state, with the trainer's
    number of threads (host arithmetic in another thread count rounds differently)."""
    try:
        torch.set_num_threads(threads)
        device = torch.device(spec.device)
        cuda = device.type == "cuda"
        if cuda:  # sent batches stay allocated here until the trainer lets go: never crowd the trainer out
            index = torch.cuda.current_device() if device.index is None else device.index
            torch.cuda.set_per_process_memory_fraction(0.25, index)
        maker = BatchMaker(spec)
        maker.set_state(state)
        stream = torch.cuda.Stream(maker.device) if cuda else None
        with torch.cuda.stream(stream):
            while not stop.is_set():
                b = maker()
                if cuda:
                    stream.synchronize()  # the consumer reads it on another stream of another process
                item = (b, maker.state())
                del b
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                del item
                if cuda:  # reuse the memory of batches the trainer has copied
                    torch.cuda.ipc_collect()
    except BaseException:
        q.put(traceback.format_exc())  # the process waits at exit until this has reached the pipe
        return
    q.cancel_join_thread()  # stopped: batches still queued may be dropped


def _drain(q) -> None:
    """Empty a producer's queue so that a producer blocked on put sees the stop flag."""
    try:
        while True:
            q.get_nowait()
    except (queue.Empty, OSError, ValueError):
        pass
