"""Training data: the staged format (int16 .npy shards and a JSON index per bank, written by
`write_shards` for scripts/prepare_data.py) and, on the device, the banks held in memory and
assembled into fixed-shape training windows with their transcripts."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import text as text_mod
from .floor import suppress_floor
from .transfer import to_device


@dataclass
class Clip:
    start: int    # offset in the concatenated audio
    length: int
    text: str
    speaker: str
    words: list[str] = field(init=False)  # the normalised transcript, split once (windows take shares of it)

    def __post_init__(self):
        self.words = text_mod.normalize(self.text).split() if self.text else []


def to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1, 32767 / 32768) * 32768).astype(np.int16)


def write_shards(out: Path, name: str, clips: list[tuple[np.ndarray, dict]], shard_bytes: int) -> None:
    """Concatenate clips into int16 shards; the index records shard, offset and length of each."""
    index, buf, size, shard = [], [], 0, 0

    def flush():
        nonlocal buf, size, shard
        if buf:
            np.save(out / f"{name}_{shard:02d}.npy", np.concatenate(buf))
            shard, buf, size = shard + 1, [], 0

    for audio, meta in clips:
        pcm = to_int16(audio)
        if size and size + pcm.nbytes > shard_bytes:
            flush()
        index.append({**meta, "shard": f"{name}_{shard:02d}.npy", "offset": size // 2, "length": len(pcm)})
        buf.append(pcm)
        size += pcm.nbytes
    flush()
    (out / f"{name}.json").write_text(json.dumps(index, indent=0))


def _load_bank(folder: Path, name: str, device) -> tuple[torch.Tensor, list[dict]]:
    index = json.loads((folder / f"{name}.json").read_text())
    shards = {s: np.load(folder / s) for s in sorted({e["shard"] for e in index})}
    base, offsets = 0, {}
    for s, arr in shards.items():
        offsets[s] = base
        base += len(arr)
    audio = torch.from_numpy(np.concatenate(list(shards.values()))).to(device)  # int16, (total,)
    for e in index:
        e["start"] = offsets[e["shard"]] + e["offset"]
    return audio, index


class TrainingData:
    """Random 30 s training windows: utterances placed one after another with short random gaps,
    starting at a random point of the first one; some windows end early (zero tail), as the last
    window of a file does at inference."""

    def __init__(self, folder: str | Path, device, window: int, sample_rate: int = 16000,
                 p_short: float = 0.25, max_gap_s: float = 0.4, seed: int = 0, floor_db: float = 0.0,
                 speeds: tuple[float, ...] = (1.0,)):
        """`speeds`: the speech is also held played faster or slower by these factors (1.0: as
        recorded), every version drawn as often: more voices and speaking rates from the same minutes."""
        folder = Path(folder)
        self.device, self.window, self.sr = device, window, sample_rate
        self.p_short, self.max_gap = p_short, int(max_gap_s * sample_rate)
        speech, index = _load_bank(folder, "speech", device)
        clips = [Clip(e["start"], e["length"], e.get("text", ""), e["speaker"]) for e in index]
        if not speeds or any(not 0.5 <= r <= 2.0 for r in speeds):
            raise ValueError(f"speeds must be factors between 0.5 and 2, got {speeds}")
        banks, self.clips, base = [], [], 0
        for r in speeds:
            bank, placed = (speech, clips) if r == 1.0 else change_speed(speech, clips, r)
            banks.append(bank)
            self.clips += [Clip(base + c.start, c.length, c.text, c.speaker if r == 1.0 else f"{c.speaker}@{r:g}")
                           for c in placed]
            base += len(bank)
        self.speech = banks[0] if len(banks) == 1 else torch.cat(banks)
        # the targets: the same speech with each utterance's own steady floor lowered (floor.py); the
        # degraded inputs are still made from the recordings as they are
        self.target = self.speech
        if floor_db > 0:
            self.target = self.speech.clone()
            for c in self.clips:
                x = self.speech[c.start : c.start + c.length].float() / 32768
                y = suppress_floor(x, floor_db)
                self.target[c.start : c.start + c.length] = (y * 32768).round().clamp(-32768, 32767).short()
        noise, nidx = _load_bank(folder, "noise", device)
        self.noises = [noise[e["start"] : e["start"] + e["length"]].float() / 32768 for e in nidx]
        self.noise_names = [e["path"] for e in nidx]
        rir, ridx = _load_bank(folder, "rir", device)
        self.rirs = [rir[e["start"] : e["start"] + e["length"]].float() / 32768 for e in ridx]
        self.rir_names = [e["path"] for e in ridx]
        self.rng = random.Random(seed)

    def minutes(self) -> float:
        return sum(c.length for c in self.clips) / self.sr / 60

    def window_batch(self, batch: int) -> tuple[torch.Tensor, torch.Tensor, list[str | None], torch.Tensor]:
        """(B, window) float clean audio at random gain, the same windows of the targets (the same
        tensor when no floor is lowered), each window's transcript (None when any part of it has none),
        and (B,) the number of samples before the zero tail."""
        plan = self.plan(batch)
        out = self.assemble(self.speech, plan)
        peak = out.abs().amax(-1).clamp_min(1e-4)
        gains = torch.minimum(to_device([10 ** (g / 20) for g in plan.gain_db], self.device), 0.99 / peak)[:, None]
        clean = out * gains
        target = clean if self.target is self.speech else self.assemble(self.target, plan) * gains
        return clean, target, plan.texts, to_device(plan.ends, self.device)

    def plan(self, batch: int) -> "WindowPlan":
        """What each window holds, drawn from the random state alone (on the host)."""
        pieces: list[tuple[int, int, int, int]] = []
        gain_db: list[float] = []
        texts: list[str | None] = []
        ends: list[int] = []
        for b in range(batch):
            end = self.window
            if self.rng.random() < self.p_short:
                end = self.rng.randint(min(3 * self.sr, self.window), self.window)  # windows under 3 s stay whole
            pos, words, labelled = 0, [], True
            first = True
            while pos < end:
                c = self.clips[self.rng.randrange(len(self.clips))]
                skip = self.rng.randrange(c.length // 2) if first else 0
                first = False
                n = min(c.length - skip, end - pos)
                pieces.append((b, pos, c.start + skip, n))
                if c.text:
                    w = c.words
                    words += w[int(len(w) * skip / c.length) : int(round(len(w) * (skip + n) / c.length))]
                else:
                    labelled = False
                last = pos + n
                pos = last + self.rng.randint(0, self.max_gap)
            texts.append(" ".join(words) if labelled and words else None)
            ends.append(last)
            gain_db.append(self.rng.uniform(-12.0, 6.0))
        return WindowPlan(batch, pieces, gain_db, texts, ends)

    def assemble(self, bank: torch.Tensor, plan: "WindowPlan") -> torch.Tensor:
        """The planned windows (B, window) from an int16 bank, as floats, silent in the gaps: one gather
        on the device, whatever the number of pieces (a copy per piece was hundreds of small kernels)."""
        rows, pos, start, n = to_device(plan.pieces, self.device, torch.long).unbind(-1)
        marks = torch.zeros(plan.batch * self.window, dtype=torch.long, device=self.device)
        marks[rows * self.window + pos] = torch.arange(1, len(plan.pieces) + 1, device=self.device)
        piece = marks.view(plan.batch, self.window).cummax(-1).values - 1  # every row starts with a piece
        offset = torch.arange(self.window, device=self.device) - pos[piece]
        src = (start[piece] + offset).clamp_max(bank.shape[0] - 1)
        return torch.where(offset < n[piece], bank[src].float() / 32768, 0.0)


@dataclass
class WindowPlan:
    batch: int
    pieces: list[tuple[int, int, int, int]]  # (row, position in the window, bank offset, length)
    gain_db: list[float]                     # per row, before the peak limit
    texts: list[str | None]
    ends: list[int]                          # per row, samples before the zero tail


def change_speed(bank: torch.Tensor, clips: list[Clip], factor: float) -> tuple[torch.Tensor, list[Clip]]:
    """Every clip of an int16 bank played `factor` times faster (pitch and tempo together, as a tape
    would), band-limited: resampled through its spectrum, whatever was above the new Nyquist dropped.
    Returns the new bank and its clips (same order, texts and speakers)."""
    out, placed, pos = [], [], 0
    for c in clips:
        x = bank[c.start : c.start + c.length].float()
        n = max(1, int(round(c.length / factor)))
        spec = torch.fft.rfft(x)
        keep = min(spec.shape[-1], n // 2 + 1)
        y = torch.fft.irfft(spec[:keep], n=n) * (n / c.length)
        out.append(y.round().clamp(-32768, 32767).to(torch.int16))
        placed.append(Clip(pos, n, c.text, c.speaker))
        pos += n
    return torch.cat(out), placed


def load_validation(folder: str | Path, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed validation windows: clean and degraded (B, window), already level-normalised."""
    v = np.load(Path(folder) / "val.npz")
    to = (lambda a: torch.from_numpy(a.astype(np.float32) / 32768).to(device))
    return to(v["clean"]), to(v["degraded"])
