"""Training batches: one maker that assembles windows and degrades them, and the producers that run it
beside the training step (in line, or in a background thread).

Every batch travels with the maker's random state after it was made, so a checkpoint taken after
step n restarts the producer at batch n + 1 exactly, whichever producer ran and however far ahead it was.
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
from dataclasses import dataclass, field
from typing import Iterator

import torch

from .. import text as text_mod
from .data import TrainingData
from .degrade import DegradeConfig, Degrader
from .transfer import to_device

LEVEL_RMS = 0.05  # degraded input is normalised to this RMS; the codec scale assumes it
PRODUCERS = ("inline", "thread")


def level_normalise(clean: torch.Tensor, degraded: torch.Tensor, lengths: torch.Tensor):
    """Scale each pair so that the degraded content has RMS LEVEL_RMS (as the pipeline does)."""
    rms = (degraded.square().sum(-1) / lengths.clamp_min(1)).sqrt().clamp_min(1e-5)
    g = (LEVEL_RMS / rms)[:, None]
    return clean * g, degraded * g


@dataclass(frozen=True)
class BatchSpec:
    """All a maker needs."""
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
    speeds: tuple = (1.0,)      # speech speed factors (data.TrainingData)


Batch = tuple  # (clean, degraded, use_cond, ids, mask, frame_mask)


class BatchMaker:
    """Random training windows (data.py), degraded (degrade.py), level-normalised, with condition and
    transcript dropout drawn: one batch per call, a function of the spec and the random state alone."""

    def __init__(self, spec: BatchSpec):
        self.spec = spec
        self.device = torch.device(spec.device)
        self.data = TrainingData(spec.data_dir, self.device, spec.window, spec.sample_rate, seed=spec.seed,
                                 floor_db=spec.floor_db, speeds=tuple(spec.speeds))
        self.degrader = Degrader(spec.degrade, self.data.noises, self.data.rirs, self.data.noise_names,
                                 self.data.rir_names, talkers=self.data.speech)
        self.gen = random.Random(spec.seed + 1)  # degradation parameters and dropout, drawn on the host

    def state(self) -> dict:
        return {"gen": self.gen.getstate(), "rng": self.data.rng.getstate()}

    def set_state(self, state: dict) -> None:
        if isinstance(state["gen"], torch.Tensor):
            raise ValueError("this checkpoint's batch state comes from a torch generator (an older format); "
                             "it cannot resume exactly: start a new run with --init from its export")
        self.gen.setstate(state["gen"])
        self.data.rng.setstate(state["rng"])

    def __call__(self) -> Batch:
        s = self.spec
        clean, target, texts, lengths = self.data.window_batch(s.batch)
        degraded, _ = self.degrader(clean, self.gen)
        keep = torch.arange(s.window, device=self.device)[None] < lengths[:, None]
        degraded = degraded * keep  # the pipeline zero-pads the degraded input, so padding stays silent
        clean, degraded = level_normalise(target, degraded, lengths)
        use_cond = [self.gen.random() >= s.p_uncond for _ in range(s.batch)]
        keep_text = [self.gen.random() >= s.p_drop_text for _ in range(s.batch)]
        texts = [t if (t and use_cond[i] and keep_text[i]) else None for i, t in enumerate(texts)]
        ids, mask = text_mod.batch(texts, s.max_tokens, self.device)
        if s.pad_text:
            pad = s.max_tokens - ids.shape[1]
            ids = torch.nn.functional.pad(ids, (0, pad), value=text_mod.PAD_ID)
            mask = torch.nn.functional.pad(mask, (0, pad), value=False)
        frames = (lengths + s.hop - 1) // s.hop
        frame_mask = torch.arange(s.window // s.hop, device=self.device)[None] < frames[:, None]
        return clean, degraded, to_device(use_cond, self.device), ids, mask, frame_mask


def batches(maker: BatchMaker, producer: str, depth: int = 3,
            gpu_lock: threading.Lock | None = None) -> Iterator[tuple[Batch, dict]]:
    """(batch, the maker's state after it) for ever, from the maker's current state on.

    `gpu_lock`, for the thread: held by the producer while it makes a batch, so that the step can keep
    it off the GPU while CUDA graphs are captured (a capture fails if another thread makes CUDA calls
    meanwhile; trainer.py takes the lock around the steps that capture)."""
    if producer == "inline":
        return _inline(maker)
    if producer == "thread":
        return _thread(maker, depth, gpu_lock)
    raise ValueError(f"unknown producer {producer!r}: choose one of {', '.join(PRODUCERS)}")


def _inline(maker: BatchMaker) -> Iterator[tuple[Batch, dict]]:
    while True:
        b = maker()
        yield b, maker.state()


def _thread(maker: BatchMaker, depth: int, gpu_lock: threading.Lock | None = None) -> Iterator[tuple[Batch, dict]]:
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
                    with gpu_lock or contextlib.nullcontext():
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


def _drain(q: queue.Queue) -> None:
    """Empty the producer's queue so that a producer blocked on put sees the stop flag."""
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass
