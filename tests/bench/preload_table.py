#!/usr/bin/env python3
"""Tables of tests/bench/preload_sweep.sh from its vismoe-bench JSON reports.

    python3 tests/bench/preload_table.py OUT_DIR

Transfers are experts copied host -> device (MELINOE's figure of merit), per request and offloaded
MoE layer: `all` counts every copy (prefill, decode, preload), `decode` the copies made during decode
steps plus the preload's (which serve decode). Cells without a report are skipped.
"""

import json
import os
import sys

POLICIES = ["lru", "lfu", "guarded", "lru-history"]


def load(out, name):
    path = os.path.join(out, name + ".json")
    return json.load(open(path)) if os.path.exists(path) else None


def cells(r):
    req = r["requests"]
    used = f'{r["preload_used"] / req:.1f}/{r["preload_issued"] / req:.1f}' if r["preload_issued"] else "-"
    kept = "-"
    if r.get("preload_kept_lookups") and r.get("decode_offloaded_lookups"):
        kept = f'{r["preload_kept_lookups"] / r["decode_offloaded_lookups"]:.3f}'
    return [f'{r["transfers_per_layer"]:.2f}', f'{r["decode_transfers_per_layer"]:.2f}',
            f'{r["decode_transfers_per_token"]:.2f}', f'{r["bytes_h2d"] / req / 1e6:.2f}',
            f'{r["decode_hit_ratio"]:.3f}', used, kept, f'{r["stall_seconds"] / req * 1e3:.1f}',
            f'{r["tpot_seconds_mean"] * 1e3:.1f}']


HEAD = ("| transfers / layer, all | decode (+ preload) / layer | decode transfers / token | MB / request "
        "| decode hit ratio | preloaded used / issued per request | kept lookups / decode lookups "
        "| stall ms / request | TPOT ms |")


def vqa(out):
    for s, title in (("calib", "calibration set (36 requests)"),
                     ("long", "caption + list eval questions (150 requests)")):
        if load(out, f"vqa-{s}-12-lru-none") is None:
            continue
        first = load(out, f"vqa-{s}-12-lru-none")
        print(f"\n### VQA model, {title}: {first['completion_tokens'] / first['requests']:.2f} "
              "generated tokens / request\n")
        print("| budget | eviction | preload " + HEAD)
        print("|---" * 12 + "|")
        for budget in (11, 12, 14, 16):
            for pol in POLICIES:
                for pre in ("none", "prefill-routing"):
                    r = load(out, f"vqa-{s}-{budget}-{pol}-{pre}")
                    if r is None:
                        continue
                    print(f"| {budget} MiB | {pol} | {'on' if pre != 'none' else 'off'} | "
                          + " | ".join(cells(r)) + " |")


def params(out):
    for cfg, title in (("11-lru", "11 MiB, lru"), ("14-lfu", "14 MiB, lfu")):
        if load(out, f"params-{cfg}-4-0.5") is None:
            continue
        print(f"\n### Experts per layer N x share (VQA, caption + list, {title})\n")
        budget, pol = cfg.split("-")
        base = load(out, f"vqa-long-{budget}-{pol}-none")
        print("| N | share " + HEAD)
        print("|---" * 11 + "|")
        if base is not None:
            print("| off | - | " + " | ".join(cells(base)) + " |")
        for n in (1, 2, 4, 8):
            for share in ("0.25", "0.5", "0.75", "1.0"):
                r = load(out, f"params-{cfg}-{n}-{share}")
                if r is not None:
                    print(f"| {n} | {share} | " + " | ".join(cells(r)) + " |")


def mid(out):
    if load(out, "mid-lru-none") is None:
        return
    print("\n### qwen3-vl-mid (synthetic weights, random routing), 64 MiB\n")
    print("| eviction | preload " + HEAD)
    print("|---" * 11 + "|")
    for pol in POLICIES:
        for pre in ("none", "prefill-routing"):
            r = load(out, f"mid-{pol}-{pre}")
            if r is not None:
                print(f"| {pol} | {'on' if pre != 'none' else 'off'} | " + " | ".join(cells(r)) + " |")
    print("\nBatch sweep (B sequences decode together; MB copied per generated token, preload "
          "copies included; preloaded used / preload MB):\n")
    print("| eviction | preload | B=1 | B=4 | B=8 |")
    print("|---|---|---|---|---|")
    for pol in POLICIES:
        for pre in ("none", "prefill-routing"):
            r = load(out, f"mid-{pol}-{pre}")
            if r is None or "batch_sweep" not in r:
                continue
            row = []
            for b in r["batch_sweep"]["rows"]:
                c = f'{b["bytes_per_token"] / 1e6:.2f}'
                if b["preload_bytes"]:
                    c += f' ({b["preload_used"]} / {b["preload_bytes"] / 1e6:.1f})'
                row.append(c)
            print(f"| {pol} | {'on' if pre != 'none' else 'off'} | " + " | ".join(row) + " |")


def batch(out):
    rows = {pre: load(out, f"batch-{pre}") for pre in ("none", "0.5", "1.0")}
    if rows["none"] is None:
        return
    print("\n### Batch sweep, qwen3-vl-mid, 96 MiB (49 slabs), lru: MB copied per generated token "
          "(preloaded used / preload MB)\n")
    sizes = [b["batch"] for b in rows["none"]["batch_sweep"]["rows"]]
    print("| preload | " + " | ".join(f"B={b}" for b in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for pre, r in rows.items():
        if r is None:
            continue
        row = []
        for b in r["batch_sweep"]["rows"]:
            c = f'{b["bytes_per_token"] / 1e6:.2f}'
            if b["preload_bytes"]:
                c += f' ({b["preload_used"]} / {b["preload_bytes"] / 1e6:.1f})'
            row.append(c)
        name = "off" if pre == "none" else f"on, share {pre}"
        print(f"| {name} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    out = sys.argv[1]
    vqa(out)
    params(out)
    mid(out)
    batch(out)
