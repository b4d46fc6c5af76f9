#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log per kernel: launches, total and mean
device microseconds, largest first, and the total. Usage: ncu_summary.py NCU.csv [STEPS]
(STEPS: divide the totals by the forward steps the run made, for a per-step figure).
Standard library only: it runs on the GPU machine."""
import csv
import sys
from collections import defaultdict

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
         "s": 1e6, "second": 1e6}


def short(name):
    """'vismoe::<unnamed>::GateUpInOutKernel<1>(...)' -> 'GateUpInOutKernel<1>'."""
    name = name.replace("(anonymous namespace)", "<unnamed>")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the argument list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = name[:cut]
    if head.startswith("void "):
        head = head[5:]
    return head.split("::")[-1] if "::" in head else head


def decode_steps(rows):
    """The kernels of each forward step, a step ending with its ArgmaxKernel (greedy sampling on
    the device); the first step is the prefill."""
    steps, cur = [], []
    for name, us in rows:
        cur.append((name, us))
        if name.startswith("ArgmaxKernel"):
            steps.append(cur)
            cur = []
    return steps


def main(path, steps=1):
    rows = []
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own notes before the CSV
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r["Metric Unit"]
        if unit not in UNITS:
            sys.exit(f"unknown unit {unit!r} in {path}")
        rows.append((short(r["Kernel Name"]), value * UNITS[unit]))
    per = defaultdict(lambda: [0, 0.0])
    for name, us in rows:
        per[name][0] += 1
        per[name][1] += us
    total = sum(us for _, us in rows)
    print(f"ncu: {len(rows)} kernels, {total:.1f} us of device time"
          + (f", {total / steps:.1f} us per step over {steps} steps" if steps > 1 else ""))
    for name, (n, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"  {name[:60]:60s} {n:6d} x {us / n:8.2f} us = {us:9.1f} us ({100 * us / total:5.1f}%)")
    split = decode_steps(rows)
    if len(split) > 1:
        dec = [k for step in split[1:] for k in step]
        n_steps = len(split) - 1
        per = defaultdict(lambda: [0, 0.0])
        for name, us in dec:
            per[name][0] += 1
            per[name][1] += us
        step_us = sum(us for _, us in dec) / n_steps
        print(f"per decode step ({n_steps} steps after the prefill): {len(dec) / n_steps:.0f} kernels, "
              f"{step_us:.1f} us of device time")
        for name, (n, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:25]:
            print(f"  {name[:60]:60s} {n / n_steps:6.1f} x {us / n:8.2f} us = {us / n_steps:8.1f} us "
                  f"({100 * us / n_steps / step_us:5.1f}%)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
