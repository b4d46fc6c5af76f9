#!/usr/bin/env python3
"""Helpers of tests/bench/llamacpp_compare.sh (issue #20): our CPU backend against llama.cpp.

Subcommands (the shell script calls them in this order):
  checkpoint  write a random checkpoint, deterministically, once in BF16 and once in F16 (the
              same fp32 draws rounded to each dtype): `text` is a Qwen3-MoE (qwen3_moe,
              per-expert tensors) of ~1.9 GB, `vl` is tests/fixtures/synthetic/qwen3-vl-mid's
              Qwen3-VL-MoE shape (qwen3_vl_moe, fused experts as published) with its vision
              tower, `mid` the same decoder as a text-only qwen3_moe with per-expert tensors
              and the very same text weights (so the two layouts can be timed against each
              other). Numpy only (no torch): safetensors is written by hand, tensor by tensor.
  image       a deterministic 448x448 RGB PNG (zlib only): 28x28 patches of 16, 196 visual
              tokens after the 2x2 merge on both sides (no resize: inside both min/max pixels)
  prompt      a text whose chat-templated prompt is exactly N tokens for the checkpoint's
              tokenizer (`tokenizers`; both engines use the same tokenizer.json)
  convert     llama.cpp's convert_hf_to_gguf.py from the vendored tree, with one patch: the
              fixture tokenizer is Qwen2's exact BPE pipeline retrained on 2,000 ids, so its
              hash is unknown to the converter's table; we tell it "qwen2"
  ours, llama-bench, mtmd  turn one run's raw output into one round JSON
  table       per-round ratios, medians and the bandwidth ceiling, as a markdown table
"""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")

# ~1.9 GB in BF16: the shape of the measurement that opened issue #20. Experts dominate
# (12 x 64 x 3 x 1024 x 384 x 2 B = 1.81 GB); per decoded token 8 of 64 experts are read.
TEXT_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 2000,
    "eos_token_id": 2002,
    "decoder_sparse_step": 1,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 12,
    "mlp_only_layers": [],
    "moe_intermediate_size": 384,
    "norm_topk_prob": True,
    "num_attention_heads": 16,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 12,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 2048,
}

DTYPES = {"bf16": ("BF16", "bfloat16"), "f16": ("F16", "float16")}


# ----------------------------------------------------------------------------- checkpoints

def text_tensors(t, prefix="model."):
    """(name, shape) of a Qwen3-MoE decoder; per-expert experts unless t['fused']."""
    h, hd, e, i = t["hidden_size"], t["head_dim"], t["num_experts"], t["moe_intermediate_size"]
    q, kv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    out = [(prefix + "embed_tokens.weight", [t["vocab_size"], h])]
    for n in range(t["num_hidden_layers"]):
        p = f"{prefix}layers.{n}."
        out += [(p + "input_layernorm.weight", [h]),
                (p + "self_attn.q_proj.weight", [q, h]),
                (p + "self_attn.k_proj.weight", [kv, h]),
                (p + "self_attn.v_proj.weight", [kv, h]),
                (p + "self_attn.o_proj.weight", [h, q]),
                (p + "self_attn.q_norm.weight", [hd]),
                (p + "self_attn.k_norm.weight", [hd]),
                (p + "post_attention_layernorm.weight", [h]),
                (p + "mlp.gate.weight", [e, h])]
        if t.get("fused"):
            out += [(p + "mlp.experts.gate_up_proj", [e, h, 2 * i]),
                    (p + "mlp.experts.down_proj", [e, i, h])]
        else:
            for x in range(e):
                out += [(p + f"mlp.experts.{x}.gate_proj.weight", [i, h]),
                        (p + f"mlp.experts.{x}.up_proj.weight", [i, h]),
                        (p + f"mlp.experts.{x}.down_proj.weight", [h, i])]
    out += [(prefix + "norm.weight", [h])]
    return out


def vision_tensors(v):
    h, f, o = v["hidden_size"], v["intermediate_size"], v["out_hidden_size"]
    m = h * v["spatial_merge_size"] ** 2
    p = "model.visual."
    out = [(p + "patch_embed.proj.weight",
            [h, v["in_channels"], v["temporal_patch_size"], v["patch_size"], v["patch_size"]]),
           (p + "patch_embed.proj.bias", [h]),
           (p + "pos_embed.weight", [v["num_position_embeddings"], h])]
    for n in range(v["depth"]):
        b = f"{p}blocks.{n}."
        out += [(b + "norm1.weight", [h]), (b + "norm1.bias", [h]),
                (b + "attn.qkv.weight", [3 * h, h]), (b + "attn.qkv.bias", [3 * h]),
                (b + "attn.proj.weight", [h, h]), (b + "attn.proj.bias", [h]),
                (b + "norm2.weight", [h]), (b + "norm2.bias", [h]),
                (b + "mlp.linear_fc1.weight", [f, h]), (b + "mlp.linear_fc1.bias", [f]),
                (b + "mlp.linear_fc2.weight", [h, f]), (b + "mlp.linear_fc2.bias", [h])]

    def merger(q, norm_width):
        return [(q + "norm.weight", [norm_width]), (q + "norm.bias", [norm_width]),
                (q + "linear_fc1.weight", [m, m]), (q + "linear_fc1.bias", [m]),
                (q + "linear_fc2.weight", [o, m]), (q + "linear_fc2.bias", [o])]

    out += merger(p + "merger.", h)  # the final merger norms before the 2x2 merge
    for k in range(len(v["deepstack_visual_indexes"])):
        out += merger(f"{p}deepstack_merger_list.{k}.", m)  # these after it
    return out


def checkpoint_tensors(config):
    if config["model_type"] == "qwen3_moe":
        t = dict(config)
        return text_tensors(t) + [("lm_head.weight", [t["vocab_size"], t["hidden_size"]])]
    t = dict(config["text_config"], fused=True)
    return (text_tensors(t, "model.language_model.") + vision_tensors(config["vision_config"]) +
            [("lm_head.weight", [t["vocab_size"], t["hidden_size"]])])


def read_safetensors_shapes(paths):
    shapes = {}
    for p in paths:
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        shapes.update({k: v["shape"] for k, v in header.items()})
    return shapes


def check_layout_against_fixtures():
    """Our tensor lists must give the committed fixtures' names and shapes exactly."""
    for name, files in (("tiny-qwen3-moe", ["model.safetensors"]),
                        ("tiny-qwen3-vl-moe", ["model-00001-of-00002.safetensors",
                                               "model-00002-of-00002.safetensors"])):
        d = os.path.join(FIXTURES, name)
        config = json.load(open(os.path.join(d, "config.json")))
        want = read_safetensors_shapes([os.path.join(d, f) for f in files])
        got = {k: s for k, s in checkpoint_tensors(config)}
        if got != want:
            diff = [k for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k)][:6]
            sys.exit(f"tensor list differs from tests/fixtures/{name}: {diff}")


def init_values(name, shape, seed):
    """fp32 values of one tensor: norms 1, biases 0, matrices N(0, 0.02); seeded by name."""
    import numpy as np
    n = math.prod(shape)
    if re.search(r"norm[12]?\.weight$", name):
        return np.ones(n, np.float32)
    if name.endswith(".bias"):
        return np.zeros(n, np.float32)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)


def tensor_values(name, shape, seed):
    """init_values under the per-expert text name, so that `vl` (fused experts, under
    model.language_model.) and `mid` (qwen3_moe, per-expert) hold the same text weights."""
    import numpy as np
    canon = name.replace("model.language_model.", "model.")
    m = re.match(r"(.*\.mlp\.experts\.)(gate_up_proj|down_proj)$", canon)
    if not m:
        return init_values(canon, shape, seed)
    e, a, b = shape  # gate_up [E, H, 2I] = [gate^T | up^T]; down [E, I, H] = down^T
    out = np.empty(shape, np.float32)
    for x in range(e):
        if m.group(2) == "gate_up_proj":
            i = b // 2
            g = init_values(f"{m.group(1)}{x}.gate_proj.weight", [i, a], seed).reshape(i, a)
            u = init_values(f"{m.group(1)}{x}.up_proj.weight", [i, a], seed).reshape(i, a)
            out[x] = np.concatenate([g.T, u.T], axis=1)
        else:
            out[x] = init_values(f"{m.group(1)}{x}.down_proj.weight", [b, a], seed).reshape(b, a).T
    return out.reshape(-1)


def to_dtype(x, dtype):
    import numpy as np
    if dtype == "f16":
        return x.astype(np.float16)
    u = x.view(np.uint32)  # bf16: round to nearest even (values are finite)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(
        np.uint16)


def write_checkpoints(config, outs, seed):
    """One pass over the tensors writes model.safetensors in every dtype of outs."""
    tensors = checkpoint_tensors(config)
    files = {}
    for dtype, out in outs.items():
        header, off = {}, 0
        for name, shape in tensors:
            size = math.prod(shape) * 2
            header[name] = {"dtype": DTYPES[dtype][0], "shape": shape,
                            "data_offsets": [off, off + size]}
            off += size
        header["__metadata__"] = {"format": "pt"}
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        f = open(os.path.join(out, "model.safetensors.tmp"), "wb")
        f.write(struct.pack("<Q", len(blob)) + blob)
        files[dtype] = f
    for name, shape in tensors:
        x = tensor_values(name, shape, seed)
        for dtype, f in files.items():
            f.write(to_dtype(x, dtype).tobytes())
    for dtype, f in files.items():
        f.close()
        os.replace(f.name, os.path.join(outs[dtype], "model.safetensors"))


def cmd_checkpoint(a):
    check_layout_against_fixtures()
    if a.kind == "text":
        config, src = dict(TEXT_CONFIG), os.path.join(FIXTURES, "tiny-qwen3-moe")
        extra = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]
    elif a.kind == "mid":  # qwen3-vl-mid's decoder as a text-only qwen3_moe, per-expert
        src = os.path.join(FIXTURES, "tiny-qwen3-moe")
        extra = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]
        mid = json.load(open(os.path.join(FIXTURES, "synthetic", "qwen3-vl-mid", "config.json")))
        config = dict(TEXT_CONFIG)
        config.update({k: v for k, v in mid["text_config"].items() if k in config and k != "model_type"})
        config.update(rope_scaling=None, max_window_layers=config["num_hidden_layers"])
    else:
        src = os.path.join(FIXTURES, "synthetic", "qwen3-vl-mid")
        config = json.load(open(os.path.join(src, "config.json")))
        config.pop("_comment", None)
        extra = ["tokenizer.json", "tokenizer_config.json", "generation_config.json",
                 "preprocessor_config.json"]
    outs = {"bf16": a.out_bf16, "f16": a.out_f16}
    for dtype, out in outs.items():
        os.makedirs(out, exist_ok=True)
        c = json.loads(json.dumps(config))
        (c if a.kind != "vl" else c["text_config"])["dtype"] = DTYPES[dtype][1]
        json.dump(c, open(os.path.join(out, "config.json"), "w"), indent=2)
        for f in extra:
            shutil.copy(os.path.join(src, f), out)
        if a.kind == "vl":  # llama.cpp's converter reads the template from these files
            for f in ("chat_template.jinja", "chat_template.json"):
                shutil.copy(os.path.join(FIXTURES, "tiny-qwen3-vl-moe", f), out)
    write_checkpoints(config, outs, a.seed)
    size = os.path.getsize(os.path.join(a.out_bf16, "model.safetensors"))
    print(f"{a.kind}: {len(checkpoint_tensors(config))} tensors, {size / 1e9:.3f} GB per dtype")


# ----------------------------------------------------------------------------- image, prompt

def cmd_image(a):
    w = h = 448
    rows = []
    for y in range(h):  # smooth gradients with a few stripes: deterministic, compressible
        row = bytearray([0])
        for x in range(w):
            row += bytes(((x * 255) // w, (y * 255) // h, 255 if (x // 32 + y // 32) % 2 else 40))
        rows.append(bytes(row))

    def chunk(tag, data):
        return (struct.pack(">I", len(data)) + tag + data +
                struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
           chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b""))
    open(a.out, "wb").write(png)


TEMPLATE = "<|im_start|>user\n{image}{text}<|im_end|>\n<|im_start|>assistant\n"
WORDS = ("the expert layer routes every token to a few of many small networks and the cache "
         "keeps the hot ones close to the compute while the rest wait in host memory").split()


def cmd_prompt(a):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(a.tokenizer)
    image = ("<|vision_start|>" + "<|image_pad|>" * a.image_tokens + "<|vision_end|>"
             if a.image_tokens else "")

    def count(text):
        return len(tok.encode(TEMPLATE.format(image=image, text=text), add_special_tokens=False).ids)

    text = ""
    for k in range(10000):
        nxt = (text + " " + WORDS[k % len(WORDS)]).strip()
        if count(nxt) > a.tokens:
            break
        text = nxt
    pad = 0
    while count(text) < a.tokens:  # top up one character at a time
        text += "." if pad % 2 == 0 else " "
        pad += 1
    if count(text) != a.tokens:
        sys.exit(f"cannot build a prompt of exactly {a.tokens} tokens (got {count(text)})")
    print(text)


# ----------------------------------------------------------------------------- conversion

def cmd_convert(a):
    sys.path.insert(0, a.llama)
    sys.path.insert(0, os.path.join(a.llama, "gguf-py"))
    import convert_hf_to_gguf  # noqa: E402
    from conversion import base  # noqa: E402

    def qwen2_pre(self, tokenizer):
        del self, tokenizer
        return "qwen2"

    for cls in vars(base).values():
        if isinstance(cls, type) and "get_vocab_base_pre" in vars(cls):
            cls.get_vocab_base_pre = qwen2_pre
    sys.argv = ["convert_hf_to_gguf.py"] + a.args
    convert_hf_to_gguf.main()


# ----------------------------------------------------------------------------- parsing

def cmd_ours(a):
    r = json.load(open(a.report))
    runs = [p for p in r["per_request"] if p["run"] >= a.skip_runs]  # the first run warms up
    if not runs:
        sys.exit(f"{a.report}: no run after the {a.skip_runs} warm-up run(s)")
    for p in runs:
        if p["completion_tokens"] != a.new_tokens:
            sys.exit(f"{a.report}: generated {p['completion_tokens']} tokens, expected "
                     f"{a.new_tokens} (EOS?); change the prompt or seed")
    ttft = statistics.mean(p["ttft_seconds"] for p in runs)
    tpot = statistics.mean(p["tpot_seconds"] for p in runs)
    out = {"side": "ours", "prompt_tokens": runs[0]["prompt_tokens"],
           "visual_tokens": runs[0]["visual_tokens_after"], "new_tokens": a.new_tokens,
           "timed_runs": len(runs), "prefill_seconds": ttft, "prefill_tps":
           runs[0]["prompt_tokens"] / ttft, "decode_tps": 1.0 / tpot}
    json.dump(dict(out, **json.loads(a.meta)), open(a.out, "w"), indent=1)


def cmd_llama_bench(a):
    rows = [json.loads(open(p).read()) for p in a.reports]
    rows = [x for r in rows for x in r]
    pp = [x for x in rows if x["n_prompt"] > 0 and x["n_gen"] == 0]
    tg = [x for x in rows if x["n_gen"] > 0 and x["n_prompt"] == 0]
    if len(pp) != 1 or len(tg) != 1:
        sys.exit("llama-bench: expected one pp and one tg test")
    pp, tg = pp[0], tg[0]
    out = {"side": "llama.cpp", "prompt_tokens": pp["n_prompt"], "new_tokens": tg["n_gen"],
           "decode_depth": tg.get("n_depth", 0), "timed_runs": len(pp["samples_ns"]),
           "prefill_seconds": statistics.mean(pp["samples_ns"]) / 1e9,
           "prefill_tps": pp["avg_ts"], "decode_tps": tg["avg_ts"],
           "build_commit": pp.get("build_commit"), "cpu_info": pp.get("cpu_info"),
           "n_threads": pp.get("n_threads"), "type_k": pp.get("type_k"),
           "flash_attn": pp.get("flash_attn")}
    json.dump(dict(out, **json.loads(a.meta)), open(a.out, "w"), indent=1)


def cmd_mtmd(a):
    log = open(a.log, errors="replace").read()

    def one(pattern, what):
        m = re.findall(pattern, log)
        if len(m) != 1:
            sys.exit(f"{a.log}: expected one '{what}' line, found {len(m)}")
        return m[0]

    encode_ms = float(one(r"(?:image slice encoded|mtmd batch encoding done) in (\d+) ms",
                          "mtmd batch encoding done"))  # the vision tower
    p_ms, p_tok = one(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", "prompt eval time")
    e_ms, e_runs = one(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs", "eval time")
    n_img = int(one(r"n_tokens_batch = (\d+)", "n_tokens_batch"))
    prefill_s = (encode_ms + float(p_ms)) / 1e3
    out = {"side": "llama.cpp", "prompt_tokens": int(p_tok), "visual_tokens": n_img,
           "new_tokens": int(e_runs) + 1, "timed_runs": 1,  # the first comes from the prompt "encode_seconds": encode_ms / 1e3,
           "prefill_seconds": prefill_s, "prefill_tps": int(p_tok) / prefill_s,
           "decode_tps": int(e_runs) / (float(e_ms) / 1e3)}
    json.dump(dict(out, **json.loads(a.meta)), open(a.out, "w"), indent=1)


# ----------------------------------------------------------------------------- table

def active_bytes(config_path, dtype_bytes=2):
    """Weight bytes read per decoded token: attention + norms + router + top-k experts + LM head."""
    c = json.load(open(config_path))
    t = c.get("text_config", c)
    h, hd, i = t["hidden_size"], t["head_dim"], t["moe_intermediate_size"]
    q, kv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    layer = (2 * h * q + 2 * h * kv + 2 * hd + 2 * h + t["num_experts"] * h +
             t["num_experts_per_tok"] * 3 * h * i)
    return dtype_bytes * (t["num_hidden_layers"] * layer + h + t["vocab_size"] * h)


def cmd_table(a):
    rounds = {}
    for name in sorted(os.listdir(a.results)):
        if name.endswith(".json") and name.startswith("round"):
            r = json.load(open(os.path.join(a.results, name)))
            rounds.setdefault((r["row"], r["round"]), {})[r["side"]] = r
    bw = json.load(open(a.bandwidth))
    gbps = statistics.median(bw["read_bandwidth_gbps"])  # before and after the rounds
    rows, summary = [], {"read_bandwidth_gbps": bw["read_bandwidth_gbps"], "rows": {}}
    for row in a.rows:
        pairs = [v for (rw, _), v in sorted(rounds.items()) if rw == row and len(v) == 2]
        if not pairs:
            continue
        o, l = [p["ours"] for p in pairs], [p["llama.cpp"] for p in pairs]
        dec_ratio = [x["decode_tps"] / y["decode_tps"] for x, y in zip(o, l)]
        pre_ratio = [x["prefill_tps"] / y["prefill_tps"] for x, y in zip(o, l)]
        ab = active_bytes(o[0]["config"])
        ceiling = gbps * 1e9 / ab
        med = statistics.median
        s = {"rounds": len(pairs), "prompt_tokens": [o[0]["prompt_tokens"], l[0]["prompt_tokens"]],
             "new_tokens": [o[0]["new_tokens"], l[0]["new_tokens"]],
             "ours_decode_tps": [x["decode_tps"] for x in o],
             "llama_decode_tps": [x["decode_tps"] for x in l],
             "ours_prefill_tps": [x["prefill_tps"] for x in o],
             "llama_prefill_tps": [x["prefill_tps"] for x in l],
             "decode_ratio": dec_ratio, "prefill_ratio": pre_ratio,
             "decode_ratio_median": med(dec_ratio), "prefill_ratio_median": med(pre_ratio),
             "active_bytes_per_token": ab, "ceiling_tps": ceiling,
             "ours_share_of_ceiling": med(x["decode_tps"] for x in o) / ceiling,
             "llama_share_of_ceiling": med(x["decode_tps"] for x in l) / ceiling}
        summary["rows"][row] = s
        rows.append(
            f"| {row} | {o[0]['prompt_tokens']} / {l[0]['prompt_tokens']} | "
            f"{med(s['ours_prefill_tps']):.0f} | {med(s['llama_prefill_tps']):.0f} | "
            f"{' '.join(f'{x:.2f}' for x in pre_ratio)} | **{med(pre_ratio):.2f}** | "
            f"{med(s['ours_decode_tps']):.1f} | {med(s['llama_decode_tps']):.1f} | "
            f"{' '.join(f'{x:.2f}' for x in dec_ratio)} | **{med(dec_ratio):.2f}** | "
            f"{ab / 1e6:.0f} MB, {ceiling:.1f} | {s['ours_share_of_ceiling']:.0%} / "
            f"{s['llama_share_of_ceiling']:.0%} |")
    print("| row | prompt tokens ours / llama.cpp | prefill tok/s ours | llama.cpp | ratio per round "
          "| median | decode tok/s ours | llama.cpp | ratio per round | median | active weights "
          "/ token, ceiling tok/s | ours / llama.cpp of ceiling |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n| ours vs ours (same rounds) | prefill ratio per round | median | decode ratio per "
          "round | median | llama.cpp's decode ratio (control) |")
    print("|---|---|---|---|---|---|")
    for a_row, b_row in (("text-f16", "text-bf16"), ("mid-fused-bf16", "mid-bf16"),
                         ("vl-f16", "vl-bf16")):
        both = [(v, rounds.get((b_row, rd))) for (rw, rd), v in sorted(rounds.items()) if rw == a_row]
        both = [(x, y) for x, y in both if y and len(x) == 2 and len(y) == 2]
        if not both:
            continue
        pre = [x["ours"]["prefill_tps"] / y["ours"]["prefill_tps"] for x, y in both]
        dec = [x["ours"]["decode_tps"] / y["ours"]["decode_tps"] for x, y in both]
        ctl = [x["llama.cpp"]["decode_tps"] / y["llama.cpp"]["decode_tps"] for x, y in both]
        summary["rows"][f"{a_row}/{b_row}"] = {"ours_prefill_ratio": pre, "ours_decode_ratio": dec,
                                              "llama_decode_ratio": ctl}
        print(f"| {a_row} / {b_row} | {' '.join(f'{x:.2f}' for x in pre)} | "
              f"**{statistics.median(pre):.2f}** | {' '.join(f'{x:.2f}' for x in dec)} | "
              f"**{statistics.median(dec):.2f}** | {statistics.median(ctl):.2f} |")
    loads = sorted(float(v[s]["loadavg"].split()[0]) for v in rounds.values() for s in v)
    print(f"\n1-minute load average at the runs: {loads[0]:.1f} to {loads[-1]:.1f}, median "
          f"{statistics.median(loads):.1f}")
    print(f"\nread bandwidth (vismoe-bench --micro_kernels, {bw['threads']} threads): "
          f"{', '.join(f'{x:.1f}' for x in bw['read_bandwidth_gbps'])} GB/s, median {gbps:.1f}")
    json.dump(summary, open(a.out, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("checkpoint")
    p.add_argument("kind", choices=["text", "mid", "vl"])
    p.add_argument("--out_bf16", required=True)
    p.add_argument("--out_f16", required=True)
    p.add_argument("--seed", type=int, default=20)
    p = sub.add_parser("image")
    p.add_argument("--out", required=True)
    p = sub.add_parser("prompt")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--image_tokens", type=int, default=0)
    p = sub.add_parser("convert")
    p.add_argument("--llama", required=True)
    p.add_argument("args", nargs=argparse.REMAINDER)
    p = sub.add_parser("ours")
    p.add_argument("--report", required=True)
    p.add_argument("--new_tokens", type=int, required=True)
    p.add_argument("--skip_runs", type=int, default=1)
    p.add_argument("--meta", default="{}")
    p.add_argument("--out", required=True)
    p = sub.add_parser("llama-bench")
    p.add_argument("--reports", nargs="+", required=True)
    p.add_argument("--meta", default="{}")
    p.add_argument("--out", required=True)
    p = sub.add_parser("mtmd")
    p.add_argument("--log", required=True)
    p.add_argument("--meta", default="{}")
    p.add_argument("--out", required=True)
    p = sub.add_parser("table")
    p.add_argument("--results", required=True)
    p.add_argument("--bandwidth", required=True)
    p.add_argument("--rows", nargs="+", required=True)
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    {"checkpoint": cmd_checkpoint, "image": cmd_image, "prompt": cmd_prompt,
     "convert": cmd_convert, "ours": cmd_ours, "llama-bench": cmd_llama_bench,
     "mtmd": cmd_mtmd, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
