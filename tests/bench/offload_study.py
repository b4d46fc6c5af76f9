#!/usr/bin/env python3
"""The offload study of issue #32 on routing-realistic synthetic weights.

Runs vismoe-bench (CPU backend) on the small-hidden variant of the
Qwen3-VL-30B-A3B routing shape for every eviction x predictor x cache size,
the slab cache sized as a share of all experts (no pinned prefix), and prints
one markdown table: decode hit ratio, expert bytes copied per decoded token,
Hot Recall and wasted prefetches, beside an LRU and a Belady (clairvoyant)
replay of the same model's decode trace through one cache of the same size
shared by all layers (--routing_stats' shared figures). Every run samples at
temperature 1 with the same seeds, so the study's runs and the trace decode
the same tokens while the policies do not change what is computed.

  tests/bench/offload_study.py [--bench build/release/engine/vismoe-bench]
      [--fractions 0.1,0.2,0.4,0.6] [--tokens 256] [--out study.json]
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests/fixtures/synthetic/qwen3-vl-30b-a3b-small")
REQUESTS = os.path.join(ROOT, "tests/fixtures/routing/requests.jsonl")
CONTEXT = 2048


def run(bench, args):
    cmd = [bench, f"--model={MODEL}", "--synthetic_weights", "--synthetic_routing=realistic",
           f"--max_context_tokens={CONTEXT}", "--threads=2"] + args
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\n{out.stderr[-2000:]}")
    return json.loads(out.stdout), out.stderr


def plan_fixed_bytes(bench, args=()):
    """The plan's fixed part (resident + KV cache bytes, from the start-up log) and the bytes of
    one slab, from a one-token run with `args`."""
    probe, log = run(bench, ["--budget=1G", "--pinned_layers=0", "--max_new_tokens=1",
                             "--prompt=hi"] + list(args))
    m = re.search(r"resident (\d+) bytes.*kv cache (\d+) bytes", log)
    return int(m.group(1)) + int(m.group(2)), probe["expert_bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(ROOT, "build/release/engine/vismoe-bench"))
    ap.add_argument("--fractions", default="0.1,0.2,0.4,0.6")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    text_only = os.path.join(ROOT, "build", "offload_study_requests.jsonl")
    os.makedirs(os.path.dirname(text_only), exist_ok=True)
    n = 0
    with open(REQUESTS) as f, open(text_only, "w") as g:
        for line in f:
            r = json.loads(line)
            if r.get("images"):
                continue
            r["max_new_tokens"] = a.tokens
            # Sampled, seeded: greedy decoding of random weights falls into
            # short token cycles (and the trace replay samples too).
            r["temperature"] = 1.0
            r["seed"] = 1000 + n
            n += 1
            g.write(json.dumps(r) + "\n")
    fixed, expert = plan_fixed_bytes(a.bench)
    total_experts = 48 * 128
    ceiling, _ = run(a.bench, ["--budget=0", f"--requests={text_only}", "--routing_stats"])
    cache = {round(c["fraction"], 2): c for c in ceiling["routing_stats"]["decode"]["cache"]}
    rows = []
    for frac in [float(x) for x in a.fractions.split(",")]:
        budget = fixed + int(frac * total_experts) * expert
        for eviction in ["lru", "lfu", "guarded"]:
            for prefetch in ["none", "history", "router-lookahead"]:
                r, _ = run(a.bench, [f"--budget={budget}", "--pinned_layers=0",
                                     f"--eviction={eviction}", f"--prefetch={prefetch}",
                                     f"--requests={text_only}"])
                tokens = max(r["completion_tokens"], 1)
                row = {"fraction": frac, "eviction": eviction, "prefetch": prefetch,
                       "decode_hit_ratio": r.get("decode_hit_ratio", 0.0),
                       "decode_bytes_per_token": r["decode_transfers_per_token"] * expert,
                       "hot_recall": r["hot_recall"],
                       "prefetch_wasted": r["prefetch_issued"] - r["prefetch_used"],
                       "trace_lru": cache.get(round(frac, 2), {}).get("shared_lru_hit"),
                       "trace_belady": cache.get(round(frac, 2), {}).get("shared_belady_hit")}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print("| cache | eviction | prefetch | decode hits | decode MB copied / token | Hot Recall | "
          "wasted prefetches |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['fraction']:.0%} | {r['eviction']} | {r['prefetch']} | "
              f"{r['decode_hit_ratio']:.3f} | {r['decode_bytes_per_token'] / 1e6:.2f} | "
              f"{r['hot_recall']:.3f} | {r['prefetch_wasted']} |")
    # The ceilings: the same decode trace replayed through one shared cache.
    lookups = 48 * 8  # every layer offloaded, top-8
    print()
    print("| cache | trace LRU hits | trace Belady hits | Belady decode MB / token |")
    print("|---|---|---|---|")
    for frac in sorted({r["fraction"] for r in rows}):
        c = cache.get(round(frac, 2))
        if c is None:
            continue
        print(f"| {frac:.0%} | {c['shared_lru_hit']:.3f} | {c['shared_belady_hit']:.3f} | "
              f"{(1 - c['shared_belady_hit']) * lookups * expert / 1e6:.2f} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
