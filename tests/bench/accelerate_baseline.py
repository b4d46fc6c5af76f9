#!/usr/bin/env python3
"""Hugging Face transformers + accelerate offloading baseline for vismoe-bench (issue #9).

Builds a Qwen3-VL-MoE model with random weights of a given shape, places it the
way users offload today (accelerate device_map under a max GPU memory: every
non-expert module on the GPU, then whole MoE expert modules on the GPU while
they fit, the rest on "cpu" = weights kept in host memory and copied to the GPU
by accelerate's hooks at every forward), runs a prefill with N images and
greedy-decodes a fixed number of tokens, and prints TTFT, TPOT and bytes moved
as JSON. With --ours (a vismoe-bench --json_out report) it prints both side by
side in one table.

  python3 tests/bench/accelerate_baseline.py --shape qwen3-vl-30b-a3b \
      --max_gpu_memory 24GiB --images 1 --new_tokens 128 --ours ours.json

--shape tiny --device cpu runs the same code path without a GPU (smoke test).
Needs torch, transformers and accelerate (present on the GPU machine).
"""
import argparse
import contextlib
import inspect
import json
import sys
import time

import torch

GIB = 1 << 30

# Qwen3-VL-30B-A3B-Instruct (shared/reference/qwen3-vl-moe.md) and a tiny
# variant with the fixture's shape for smoke tests.
SHAPES = {
    "qwen3-vl-30b-a3b": dict(
        text=dict(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                  num_key_value_heads=4, head_dim=128, moe_intermediate_size=768,
                  intermediate_size=6144, num_experts=128, num_experts_per_tok=8,
                  vocab_size=151936, rope_theta=5000000, rms_norm_eps=1e-6,
                  rope_scaling={"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                                "rope_type": "default"}),
        vision=dict(depth=27, hidden_size=1152, num_heads=16, intermediate_size=4304,
                    out_hidden_size=2048, deepstack_visual_indexes=[8, 16, 24],
                    num_position_embeddings=2304)),
    "tiny": dict(
        text=dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, moe_intermediate_size=48,
                  intermediate_size=384, num_experts=16, num_experts_per_tok=4,
                  vocab_size=151936, rope_theta=5000000, rms_norm_eps=1e-6,
                  rope_scaling={"mrope_interleaved": True, "mrope_section": [6, 5, 5],
                                "rope_type": "default"}),
        vision=dict(depth=4, hidden_size=64, num_heads=4, intermediate_size=128,
                    out_hidden_size=128, deepstack_visual_indexes=[1, 2, 3],
                    num_position_embeddings=2304)),
}
IMAGE_TOKEN, VISION_START, VISION_END = 151655, 151652, 151653


def parse_bytes(s):
    units = {"K": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MIB": 1 << 20, "G": GIB, "GIB": GIB}
    s = s.strip().upper()
    for u in sorted(units, key=len, reverse=True):
        if s.endswith(u):
            return int(float(s[: -len(u)]) * units[u])
    return int(float(s))


def build_model(shape, dtype):
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration
    s = SHAPES[shape]
    cfg = Qwen3VLMoeConfig(
        text_config=dict(s["text"], hidden_act="silu", attention_bias=False, mlp_only_layers=[],
                         decoder_sparse_step=1, norm_topk_prob=True),
        vision_config=dict(s["vision"], hidden_act="gelu_pytorch_tanh", patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, in_channels=3),
        image_token_id=IMAGE_TOKEN, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END, tie_word_embeddings=False)
    with no_init_weights():  # every parameter is filled below; skip transformers' own pass
        model = Qwen3VLMoeForConditionalGeneration._from_config(cfg, dtype=dtype).eval()
    fill_random(model)
    return model, cfg


def no_init_weights():
    """transformers' switch that skips weight initialisation (moved in 5.x)."""
    try:
        from transformers import initialization
        return initialization.no_init_weights()
    except (ImportError, AttributeError):
        pass
    try:
        from transformers.modeling_utils import no_init_weights as legacy
        return legacy()
    except ImportError:
        return contextlib.nullcontext()


def fill_random(model):
    """Every parameter from a 64 Mi-element N(0, 0.02) pool at varying offsets (norm weights 1).

    normal_ over 31 B parameters takes minutes on the CPU; copying slices of one
    pool runs at memory speed, and timing does not depend on the values beyond
    routing being spread over the experts, which a random router gives.
    """
    g = torch.Generator().manual_seed(0)
    pool_n = 1 << 26
    pools = {}
    offset = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
                continue
            if p.dtype not in pools:
                pools[p.dtype] = (torch.randn(2 * pool_n, generator=g) * 0.02).to(p.dtype)
            pool, flat = pools[p.dtype], p.view(-1)
            for start in range(0, flat.numel(), pool_n):
                n = min(pool_n, flat.numel() - start)
                flat[start:start + n].copy_(pool[offset:offset + n])
                offset = (offset + 7919) % pool_n


def module_bytes(module):
    return sum(p.numel() * p.element_size() for p in module.parameters())


def build_device_map(model, budget_bytes, reserve_bytes):
    """Non-expert modules on GPU 0; expert modules on GPU in layer order while they fit."""
    experts = [(n, m) for n, m in model.named_modules() if n.endswith("mlp.experts")]
    expert_names = {n for n, _ in experts}
    expert_total = sum(module_bytes(m) for _, m in experts)
    resident = module_bytes(model) - expert_total
    left = budget_bytes - reserve_bytes - resident
    if left < 0:
        sys.exit(f"budget {budget_bytes} B < resident {resident} B + reserve {reserve_bytes} B")
    device_map, on_gpu, offloaded = {}, 0, 0
    for n, m in experts:
        b = module_bytes(m)
        if b <= left:
            device_map[n] = 0
            left -= b
            on_gpu += 1
        else:
            device_map[n] = "cpu"
            offloaded += b
    # Every other leaf module with parameters goes to the GPU.
    for n, m in model.named_modules():
        if any(n == e or n.startswith(e + ".") for e in expert_names):
            continue
        if list(m.parameters(recurse=False)) or list(m.buffers(recurse=False)):
            device_map[n] = 0
    return device_map, dict(resident_bytes=resident, expert_modules_on_gpu=on_gpu,
                            expert_modules_offloaded=len(experts) - on_gpu,
                            offloaded_bytes=offloaded)


def make_inputs(model, images, image_size, prompt_tokens, device):
    g = torch.Generator().manual_seed(1)
    text = torch.randint(1000, 100000, (prompt_tokens,), generator=g)
    grid = image_size // 16
    merged = (grid // 2) * (grid // 2)
    ids = [text[: prompt_tokens // 2]]
    for _ in range(images):
        ids += [torch.tensor([VISION_START]), torch.full((merged,), IMAGE_TOKEN),
                torch.tensor([VISION_END])]
    ids.append(text[prompt_tokens // 2:])
    input_ids = torch.cat(ids).unsqueeze(0).to(device)
    inputs = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    if images:
        patch = 3 * 2 * 16 * 16
        inputs["pixel_values"] = torch.randn(images * grid * grid, patch, generator=g).to(
            device, torch.bfloat16 if device != "cpu" else torch.float32)
        inputs["image_grid_thw"] = torch.tensor([[1, grid, grid]] * images, device=device)
        # transformers >= 5 takes the M-RoPE token types from the processor
        # (1 = image token); without them generate() falls back to text positions.
        if "mm_token_type_ids" in inspect.signature(type(model).forward).parameters:
            inputs["mm_token_type_ids"] = (input_ids == IMAGE_TOKEN).int()
    return inputs


class StepClock:
    """LogitsProcessor that timestamps every generated token (after a device sync)."""

    def __init__(self, sync):
        self.sync, self.times = sync, []

    def __call__(self, input_ids, scores):
        self.sync()
        self.times.append(time.perf_counter())
        return scores


def run(args):
    from transformers import LogitsProcessorList
    gpu = args.device != "cpu"
    dtype = torch.bfloat16 if gpu else torch.float32
    t0 = time.perf_counter()
    model, _ = build_model(args.shape, dtype)
    placement = {}
    if gpu:
        from accelerate import dispatch_model
        device_map, placement = build_device_map(model, parse_bytes(args.max_gpu_memory),
                                                 parse_bytes(args.reserve))
        model = dispatch_model(model, device_map=device_map, main_device=0)
        sync = torch.cuda.synchronize
    else:
        sync = lambda: None  # noqa: E731
    print(f"model ready in {time.perf_counter() - t0:.1f} s {placement}", file=sys.stderr)
    device = "cuda:0" if gpu else "cpu"
    rows = []
    for images in args.images:
        inputs = make_inputs(model, images, args.image_size, args.prompt_tokens, device)
        clock = StepClock(sync)
        sync()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=args.new_tokens,
                                 min_new_tokens=args.new_tokens, do_sample=False,
                                 logits_processor=LogitsProcessorList([clock]))
        sync()
        end = time.perf_counter()
        n = out.shape[1] - inputs["input_ids"].shape[1]
        ttft = clock.times[0] - start
        tpot = (clock.times[-1] - clock.times[0]) / max(1, len(clock.times) - 1)
        # accelerate copies every offloaded module's weights at each forward.
        moved = placement.get("offloaded_bytes", 0) * len(clock.times)
        rows.append(dict(images=images, prompt_tokens=int(inputs["input_ids"].shape[1]),
                         new_tokens=int(n), ttft_seconds=ttft, tpot_seconds=tpot,
                         total_seconds=end - start, bytes_h2d=moved))
        print(f"images={images}: TTFT {ttft:.3f} s, TPOT {tpot * 1e3:.1f} ms", file=sys.stderr)
    return dict(baseline="transformers+accelerate", shape=args.shape, device=args.device,
                max_gpu_memory=args.max_gpu_memory, placement=placement, runs=rows,
                torch=torch.__version__, gpu_name=torch.cuda.get_device_name(0) if gpu else "")


def side_by_side(hf, ours):
    """One table: our vismoe-bench report beside the accelerate rows."""
    print(f"{'figure':<28}{'vismoe':>14}{'accelerate':>14}")
    o = ours if isinstance(ours, dict) else {}
    first = hf["runs"][0] if hf["runs"] else {}
    for key, label in [("ttft_seconds_mean", "TTFT (s)"), ("tpot_seconds_mean", "TPOT (s)"),
                       ("bytes_h2d", "bytes host->device"), ("hit_ratio", "hit ratio"),
                       ("hot_recall", "Hot Recall"), ("bound_seconds", "bound (s)")]:
        hk = {"ttft_seconds_mean": "ttft_seconds", "tpot_seconds_mean": "tpot_seconds"}.get(key, key)
        mine, theirs = o.get(key, "-"), first.get(hk, "-")
        fmt = lambda v: f"{v:.4g}" if isinstance(v, (int, float)) else str(v)  # noqa: E731
        print(f"{label:<28}{fmt(mine):>14}{fmt(theirs):>14}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-vl-30b-a3b")
    ap.add_argument("--device", default="cuda", help="cuda (accelerate offload) or cpu (smoke)")
    ap.add_argument("--max_gpu_memory", default="24GiB")
    ap.add_argument("--reserve", default="2GiB", help="kept free for activations and KV cache")
    ap.add_argument("--images", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--image_size", type=int, default=448, help="square image side in pixels")
    ap.add_argument("--prompt_tokens", type=int, default=64, help="text tokens around the images")
    ap.add_argument("--new_tokens", type=int, default=128)
    ap.add_argument("--ours", help="vismoe-bench --json_out report to print beside")
    ap.add_argument("--json_out")
    args = ap.parse_args()
    if args.image_size % 32:
        sys.exit("--image_size must be a multiple of 32 (patch 16 x merge 2)")
    hf = run(args)
    text = json.dumps(hf, indent=1)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    if args.ours:
        with open(args.ours) as f:
            side_by_side(hf, json.load(f))


if __name__ == "__main__":
    main()
