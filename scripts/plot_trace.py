"""Draw a trace written by `restore ... --trace trace.json` as a timeline: one row per engine.

    python scripts/plot_trace.py trace.json trace.png [--from-s 0 --to-s 30]
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"sot": "tab:blue", "u+so+sot": "tab:blue", "so": "tab:orange", "u": "tab:green",
           "mlp share": "tab:purple", "encode": "tab:red", "decode": "tab:brown", "conditions": "tab:gray",
           "read": "tab:olive", "write": "tab:cyan"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from-s", type=float, default=None)
    ap.add_argument("--to-s", type=float, default=None)
    args = ap.parse_args()
    events = json.load(open(args.trace))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    spans = [e for e in events if e["ph"] == "X" and not e["name"].startswith("batch")]
    t0 = min(e["ts"] for e in spans)
    rows = [t for t in ("io", "main", "second engine", "worker") if t in names.values()]
    row_of = {tid: rows.index(n) for tid, n in names.items() if n in rows}
    fig, ax = plt.subplots(figsize=(14, 0.7 * len(rows) + 1.2))
    seen = set()
    for e in spans:
        if e["tid"] not in row_of:
            continue
        start, dur = (e["ts"] - t0) / 1e6, e["dur"] / 1e6
        if (args.from_s is not None and start + dur < args.from_s) or (args.to_s is not None and start > args.to_s):
            continue
        colour = COLOURS.get(e["name"], "tab:gray")
        ax.broken_barh([(start, dur)], (row_of[e["tid"]] - 0.4, 0.8), color=colour,
                       label=e["name"] if e["name"] not in seen else None)
        seen.add(e["name"])
    for e in (e for e in events if e["ph"] == "X" and e["name"].startswith("batch")):
        ax.axvline((e["ts"] - t0) / 1e6, color="k", lw=0.5, ls=":")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("seconds")
    if args.from_s is not None or args.to_s is not None:
        ax.set_xlim(args.from_s, args.to_s)
    ax.legend(loc="upper right", fontsize=8, ncol=5)
    ax.set_title("what ran where (dotted: window batch starts)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
