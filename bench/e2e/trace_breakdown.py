#!/usr/bin/env python3
"""Where a training step's time goes, from a `tower train --trace FILE` trace.

Per step (from one "towers: forward, backward, reduce" slice on the main lane to the next): the
period; each tower lane's kernel time; "outside the kernels", 1 - the towers' mean kernel time /
the period; and the main lane's parts: the towers' phase (and in it, the time before the first
kernel, after the last, and between kernels; the spread of the towers' last kernels, which the
first done waits out, and the time after the slowest tower's), the optimizer and moving average,
taking the next batch, and logging and summaries; then "outside the kernels" per core, split into
the reduction, the update and the rest. The first `--skip` steps (warm-up) are left out; the
figures are medians over the rest.

usage: bench/e2e/trace_breakdown.py TRACE [--skip N]
"""
import argparse
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    lanes = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    slices = [e for e in events if e.get("ph") == "X"]
    return lanes, slices


def overlap(begin, end, slices):
    """The time of `slices` (sorted, on one lane) inside [begin, end)."""
    return sum(max(0.0, min(end, s["ts"] + s["dur"]) - max(begin, s["ts"])) for s in slices)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--skip", type=int, default=10, help="warm-up steps left out (10)")
    args = parser.parse_args()
    lanes, slices = load(args.trace)
    main_tid = next((t for t, n in lanes.items() if n.startswith("main")), None)
    towers = sorted(t for t, n in lanes.items() if n.startswith("tower "))
    if main_tid is None or not towers:
        sys.exit(f"{args.trace}: no main lane or tower lanes (lanes: {sorted(lanes.values())})")
    on_main = sorted((s for s in slices if s["tid"] == main_tid), key=lambda s: s["ts"])
    steps = [s for s in on_main if s["name"].startswith("towers")]
    kernels = {t: sorted((s for s in slices if s["tid"] == t and s["cat"] == "kernel"),
                         key=lambda s: s["ts"]) for t in towers}
    update_lanes = [t for t, n in lanes.items() if n.startswith("update")]
    rows = []
    for step, after in zip(steps[args.skip:], steps[args.skip + 1:]):
        begin, end = step["ts"], after["ts"]
        phase_end = step["ts"] + step["dur"]
        row = {"period": end - begin, "towers": step["dur"]}
        busy, first, last, gaps = [], [], [], []
        for t in towers:
            inside = [k for k in kernels[t] if begin <= k["ts"] < phase_end]
            busy.append(overlap(begin, end, kernels[t]))
            if inside:
                first.append(inside[0]["ts"] - begin)
                last.append(phase_end - (inside[-1]["ts"] + inside[-1]["dur"]))
                gaps.append(sum(b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(inside, inside[1:])))
        row["kernels"] = statistics.mean(busy)
        row["before first kernel"] = statistics.mean(first) if first else 0.0
        row["after last kernel"] = statistics.mean(last) if last else 0.0
        # The towers' imbalance (how long the first done waits for the last), and what the step
        # spends once the slowest tower is done (the reduction that is left).
        row["tower spread"] = max(last) - min(last) if last else 0.0
        row["after the slowest"] = min(last) if last else 0.0
        row["between kernels"] = statistics.mean(gaps) if gaps else 0.0
        # Per core (one per tower lane): what the reduction and the update take of "outside the
        # kernels". The update runs on the main lane (the caller's share, and its wait for the
        # rest) and the update lanes.
        row["reduction per core"] = sum(
            s["dur"] for s in slices if s["tid"] in towers and s["cat"] == "reduce"
            and begin <= s["ts"] < end) / len(towers)
        row["update per core"] = sum(
            s["dur"] for s in slices if (s["tid"] in update_lanes or
                                         (s["tid"] == main_tid and s["name"] == "optimizer"))
            and begin <= s["ts"] < end) / len(towers)
        for label, prefix in (("optimizer", "optimizer"), ("next batch", "take the next batch"),
                              ("wait for a batch", "wait for a batch"),
                              ("log and summaries", "log and summaries")):
            row[label] = sum(s["dur"] for s in on_main
                             if s["name"].startswith(prefix) and begin <= s["ts"] < end)
        rows.append(row)
    if not rows:
        sys.exit(f"{args.trace}: {len(steps)} steps, none left after --skip {args.skip}")
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"{len(rows)} steps (after {args.skip} skipped), {len(towers)} tower lanes; "
          f"medians in ms")
    for key in ("period", "kernels", "towers", "before first kernel", "between kernels",
                "after last kernel", "tower spread", "after the slowest", "optimizer",
                "next batch", "wait for a batch", "log and summaries"):
        print(f"  {key:<20} {med[key] / 1000:8.3f}")
    spread = statistics.mean(r["tower spread"] for r in rows)
    print(f"  tower spread, mean   {spread / 1000:8.3f}")
    outside = statistics.median(1 - r["kernels"] / r["period"] for r in rows)
    print(f"  outside the kernels  {100 * outside:7.1f}% of the period")
    # The same time per core, split: summing the towers' gradients, the optimizer's update (with
    # the moving average and the replica copies), and the rest (waiting for the slowest tower,
    # hand-offs between threads, the batch copy).
    parts = {k: statistics.median(r[k] / r["period"] for r in rows)
             for k in ("reduction per core", "update per core")}
    for key, share in parts.items():
        print(f"    {key:<20} {100 * share:5.1f}%")
    print(f"    {'rest':<20} {100 * (outside - sum(parts.values())):5.1f}%")


if __name__ == "__main__":
    main()
