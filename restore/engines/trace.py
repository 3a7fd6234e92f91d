"""A timeline of what ran where: Chrome trace / Perfetto JSON (open in ui.perfetto.dev or
chrome://tracing). Timestamps are CLOCK_MONOTONIC, shared by the main and worker processes.

The tracer also carries the long phases before the first sampler step (loading the model, measuring
the MLP split, compiling, starting a worker) to whoever shows progress: `phase(text)` tells `status`
and, when tracing, records a span on the track "phases"."""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable


def now_us() -> float:
    return time.monotonic_ns() / 1000.0


class Tracer:
    def __init__(self, enabled: bool = True, status: Callable[[str], None] | None = None):
        self.enabled, self.status = enabled, status
        self.events: list[dict] = []
        self.lock = threading.Lock()

    @contextmanager
    def phase(self, text: str):
        """A long piece of work the user should see named while it runs."""
        if self.status is not None:
            self.status(text)
        with self.span(text, "phases"):
            yield

    @contextmanager
    def span(self, name: str, track: str, **args):
        if not self.enabled:
            yield
            return
        start = now_us()
        try:
            yield
        finally:
            self.add([{"name": name, "track": track, "ts": start, "dur": now_us() - start, "args": args}])

    def add(self, events: list[dict]) -> None:
        if self.enabled and events:
            with self.lock:
                self.events.extend(events)

    def write(self, path: str | Path) -> None:
        """Chrome trace format: one row (tid) per track."""
        tracks: dict[str, int] = {}
        out = []
        pid = os.getpid()
        for e in sorted(self.events, key=lambda e: e["ts"]):
            tid = tracks.setdefault(e["track"], len(tracks) + 1)
            out.append({"name": e["name"], "ph": "X", "ts": e["ts"], "dur": max(e["dur"], 0.001), "pid": pid,
                        "tid": tid, "args": e.get("args", {})})
        meta = [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
                for name, tid in tracks.items()]
        Path(path).write_text(json.dumps({"traceEvents": meta + out, "displayTimeUnit": "ms"}))
