"""Persistent cache of per-file analysis results.

An entry is keyed by the analysis name, its version string and the SHA-256 of the decoded audio
it was computed from (eval.audio.audio_hash of the estimate, plus the reference for reference-based
metrics). Renaming, moving or re-encoding files keeps their results; changing their samples, a
metric's code version or a library version computes afresh. Re-running with one new system
therefore scores only that system.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path


def default_cache_path() -> Path:
    """$XDG_CACHE_HOME/restore-eval/metrics.sqlite (~/.cache when XDG_CACHE_HOME is unset)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "restore-eval" / "metrics.sqlite"


def cache_key(analysis: str, version: str, digest: str, reference_digest: str | None = None) -> str:
    """The key of one result: a hash over everything the result depends on."""
    text = "\n".join([analysis, version, digest, reference_digest or "-"])
    return hashlib.sha256(text.encode()).hexdigest()


class MetricCache:
    """JSON values in SQLite. Written only by the main process (workers return their results),
    so there is never more than one writer. `path=None` keeps everything in memory."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path) if self.path is not None else ":memory:")
        self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, analysis TEXT, "
                         "version TEXT, audio_hash TEXT, reference_hash TEXT, value TEXT)")
        self.hits = 0
        self.misses = 0

    def get(self, analysis: str, version: str, digest: str, reference_digest: str | None = None):
        """The stored value, or None (counted as a miss). Digests come from eval.audio.audio_hash."""
        row = self._db.execute("SELECT value FROM results WHERE key = ?",
                               (cache_key(analysis, version, digest, reference_digest),)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(row[0])

    def put(self, analysis: str, version: str, digest: str, reference_digest: str | None, value) -> None:
        """Store a JSON-serialisable value (committed at once, so an interrupted run keeps its work)."""
        self._db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?)",
                         (cache_key(analysis, version, digest, reference_digest), analysis, version,
                          digest, reference_digest, json.dumps(value)))
        self._db.commit()

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def close(self) -> None:
        self._db.close()
