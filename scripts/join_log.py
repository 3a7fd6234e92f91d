"""Append a run's training log to a model's history, its steps offset by those before it.

    python scripts/join_log.py .stage/r10/run_a/log.jsonl assets/model/training_log.jsonl \
        --run r10 --init r9-soup --offset 119310

A model's `training_log.jsonl` holds every run in its line, each starting with a "start" event; a run
that continued another is offset by the steps before it, so its steps count from the first run's start
(runs made side by side from one model share the offset). The start event is marked with the run's name
and what it started from; `scripts/plot_training.py` draws one line per run. Refuses a run already in
the history (by name) and a log that does not begin with a start event.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def join(log: Path, history: Path, run: str, init: str, offset: int) -> int:
    """Append `log` to `history`; returns the number of rows written."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    if not rows or rows[0].get("event") != "start":
        raise ValueError(f"{log}: a training log begins with a start event")
    if history.exists():
        names = {json.loads(line).get("run") for line in history.read_text().splitlines()
                 if '"start"' in line}
        if run in names:
            raise ValueError(f"{history} already holds a run named {run!r}")
    for r in rows:
        if "step" in r:
            r["step"] += offset
        if r.get("event") == "start":
            r.update(run=run, init=init)
    with history.open("a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path, help="the run's log.jsonl")
    ap.add_argument("history", type=Path, help="the model's training_log.jsonl (appended to)")
    ap.add_argument("--run", required=True, help="the run's name")
    ap.add_argument("--init", required=True, help="what the run started from")
    ap.add_argument("--offset", type=int, required=True, help="steps in the runs before it")
    args = ap.parse_args()
    try:
        n = join(args.log, args.history, args.run, args.init, args.offset)
    except ValueError as e:
        sys.exit(f"error: {e}")
    print(f"{args.history}: {n} rows of {args.run} appended, steps from {args.offset}")


if __name__ == "__main__":
    main()
