#!/usr/bin/env python3
"""bf16 against FP8 experts at the Qwen3-VL-30B-A3B shape under a 24 GiB budget (issue #36).

The full shape does not fit this machine's memory, so the study runs the
small-hidden variant of the same routing shape (48 MoE layers x 128 experts,
top-8) on routing-realistic synthetic weights, CPU backend, with the slab
cache holding as many experts as the full shape's would at 24 GiB:

  experts budget = 24 GiB - resident bytes - 1 GiB (KV cache + activations)
  slabs          = experts budget // full-shape expert bytes (bf16 or FP8)

The copy engine is throttled so that one small expert takes as long as one
full-size bf16 expert over the H100's measured PCIe (50 GB/s, 0.19 ms): the
stall column is then in the product's proportions, while the compute is the
2-core CPU's. Bytes per token are measured at the small shape and scaled by
the full shape's expert bytes (copies per token are shape-independent).
Every run samples the same requests with the same seeds; FP8 experts change
the logits slightly, so its runs may draw other tokens and route a little
differently.

The "all resident" column is the same requests at budget 0 (FP8: every
expert quantised and pinned), the compute alone.

  tests/bench/fp8_30b_study.py [--bench build/release/engine/vismoe-bench]
      [--tokens 256] [--out fp8_30b.json]
"""
import argparse
import json
import os
import sys

from offload_study import REQUESTS, ROOT, plan_fixed_bytes, run  # same model, runner, requests

BUDGET = 24 << 30
RESERVE = 1 << 30  # KV cache and activations, kept aside from the experts
# The full shape's non-expert bytes: the synthetic checkpoint's 62,141,508,928
# bytes (vismoe-bench's refusal on this machine prints them) less 6,144 bf16
# experts of 3 x 2048 x 768 weights.
FULL_RESIDENT = 62141508928 - 48 * 128 * 9437184
FULL_EXPERT = {"auto": 3 * 2048 * 768 * 2,
               # e4m3 bytes + one F32 scale per 128x128 block (96 per matrix)
               "fp8": 3 * 2048 * 768 + 3 * 96 * 4}
PCIE_BYTES_PER_S = 50e9  # measured on the H100 (tests/gpu/results/20261126-h100)


def write_requests(path, tokens):
    with open(REQUESTS) as f, open(path, "w") as g:
        for n, line in enumerate(f):
            r = json.loads(line)
            r["max_new_tokens"] = tokens
            r["temperature"] = 1.0  # greedy decoding of random weights cycles
            r["seed"] = 1000 + n
            if r.get("images"):
                r["images"] = [os.path.join(os.path.dirname(REQUESTS), i) for i in r["images"]]
            g.write(json.dumps(r) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(ROOT, "build/release/engine/vismoe-bench"))
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    requests = os.path.join(ROOT, "build", "fp8_30b_requests.jsonl")
    os.makedirs(os.path.dirname(requests), exist_ok=True)
    write_requests(requests, a.tokens)
    rows = []
    shape_ratio = None  # small / full bytes of a bf16 expert: scales the PCIe bandwidth
    for dtype in ["auto", "fp8"]:
        # The plan's fixed part at the small shape, and its slab (FP8 bytes under fp8).
        fixed, small_expert = plan_fixed_bytes(a.bench, [f"--expert_dtype={dtype}"])
        slabs = (BUDGET - FULL_RESIDENT - RESERVE) // FULL_EXPERT[dtype]
        if shape_ratio is None:
            shape_ratio = small_expert / FULL_EXPERT["auto"]
        throttle = int(PCIE_BYTES_PER_S * shape_ratio)
        r, _ = run(a.bench, [f"--budget={fixed + slabs * small_expert}", "--pinned_layers=0",
                          f"--expert_dtype={dtype}", f"--requests={requests}",
                          f"--copy_bandwidth={throttle}"])
        resident, _ = run(a.bench, ["--budget=0", f"--expert_dtype={dtype}",
                                    f"--requests={requests}"])
        per_token = r["decode_transfers_per_token"]
        row = {"expert_dtype": "bf16" if dtype == "auto" else "fp8", "slabs": slabs,
               "cache_share": slabs / (48 * 128), "small_expert_bytes": small_expert,
               "full_expert_bytes": FULL_EXPERT[dtype],
               "decode_hit_ratio": r["decode_hit_ratio"],
               "decode_copies_per_token": per_token,
               "small_decode_bytes_per_token": per_token * small_expert,
               "full_decode_bytes_per_token": per_token * FULL_EXPERT[dtype],
               "tpot_seconds": r["tpot_seconds_mean"],
               "resident_tpot_seconds": resident["tpot_seconds_mean"], "stall_seconds": r["stall_seconds"],
               "bytes_h2d": r["bytes_h2d"], "completion_tokens": r["completion_tokens"],
               "copy_bandwidth": throttle}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print("| experts | slabs (share) | decode hits | copies / token | MB / token (30B shape) | "
          "MB / token (measured, small) | TPOT (CPU) | all resident | stall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['expert_dtype']} | {r['slabs']} ({r['cache_share']:.1%}) | "
              f"{r['decode_hit_ratio']:.3f} | {r['decode_copies_per_token']:.1f} | "
              f"{r['full_decode_bytes_per_token'] / 1e6:.1f} | "
              f"{r['small_decode_bytes_per_token'] / 1e6:.2f} | "
              f"{r['tpot_seconds'] * 1e3:.1f} ms | {r['resident_tpot_seconds'] * 1e3:.1f} ms | "
              f"{r['stall_seconds']:.2f} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
