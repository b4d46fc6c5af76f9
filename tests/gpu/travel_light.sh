#!/usr/bin/env bash
# The device tool sends the tracked tree with its carried paths, 64 MiB at
# most, and the fixtures alone are ~64 MiB. `hide` untracks and ignores, for
# one device call, the fixtures no part of run_bundle.sh reads: the first
# trained VQA model, the CPU parity goldens, the FP8 VL checkpoint (the text
# FP8 one covers its CUDA path), the OLMoE, Mixtral, GPT-OSS and PhiMoE shapes
# whose others (clip_qkv, sliding windows, MXFP4, LongRoPE) cover the same
# CUDA paths and more, the chat-template goldens, the committed GPU reports,
# and the checkpoints (not the configs and tokenizers) of the fixtures the gpu
# tests run on synthetic weights: DeepSeek, DeepSeek-VL2, OLMoE-clip,
# Mixtral-swa, PhiMoE-LongRoPE. `restore` puts them back in the index exactly
# as HEAD has them. The files never leave the disk.
#   tests/gpu/travel_light.sh hide | restore | size
set -euo pipefail
cd "$(dirname "$0")/../.."
paths=(
  tests/gpu/results
  tests/fixtures/vqa-qwen3-vl-moe
  tests/fixtures/vqa-eval/golden
  tests/fixtures/vqa-eval/direct/golden
  tests/fixtures/golden/text_logits.safetensors
  tests/fixtures/golden/mm_logits.safetensors
  tests/fixtures/golden/qwen3_moe_logits.safetensors
  tests/fixtures/golden/vision.safetensors
  tests/fixtures/tiny-olmoe
  tests/fixtures/golden/olmoe_logits.safetensors
  tests/fixtures/golden/olmoe_clip_logits.safetensors
  tests/fixtures/tiny-olmoe-clip/model.safetensors
  tests/fixtures/tiny-mixtral
  tests/fixtures/golden/mixtral_logits.safetensors
  tests/fixtures/golden/mixtral_swa_logits.safetensors
  tests/fixtures/tiny-mixtral-swa/model.safetensors
  tests/fixtures/tiny-qwen3-vl-moe-fp8
  tests/fixtures/golden/fp8
  tests/fixtures/golden/fp8_text_logits.safetensors
  tests/fixtures/tiny-phimoe
  tests/fixtures/golden/phimoe_logits.safetensors
  tests/fixtures/golden/phimoe_longrope_logits.safetensors
  tests/fixtures/tiny-phimoe-longrope/model.safetensors
  tests/fixtures/chat_templates
  tests/fixtures/tiny-deepseek-v2-lite/model.safetensors
  tests/fixtures/tiny-deepseek-v2-lite/tokenizer.json
  tests/fixtures/tiny-deepseek-v2-lite/tokenizer_config.json
  tests/fixtures/tiny-deepseek-v2-lite/generation_config.json
  tests/fixtures/tiny-deepseek-v2/model.safetensors
  tests/fixtures/tiny-deepseek-v3/model.safetensors
  tests/fixtures/tiny-deepseek-v3-plain/model.safetensors
  tests/fixtures/golden/deepseek_v2_lite_logits.safetensors
  tests/fixtures/golden/deepseek_v2_logits.safetensors
  tests/fixtures/golden/deepseek_v3_logits.safetensors
  tests/fixtures/golden/deepseek_v3_plain_logits.safetensors
  tests/fixtures/tiny-deepseek-v3-fp8
  tests/fixtures/golden/deepseek_v3_fp8_logits.safetensors
  tests/fixtures/tiny-gpt-oss
  tests/fixtures/golden/gpt_oss_logits.safetensors
  tests/fixtures/golden/gpt_oss_swa_logits.safetensors
  tests/fixtures/tiny-gpt-oss-swa
  tests/fixtures/golden/gpt_oss_mxfp4_logits.safetensors
  tests/fixtures/tiny-deepseek-vl2/model-00001-of-000001.safetensors
  tests/fixtures/tiny-deepseek-vl2/model.safetensors.index.json
  tests/fixtures/tiny-deepseek-vl2/processor_config.json
  tests/fixtures/tiny-deepseek-vl2/special_tokens_map.json
  tests/fixtures/tiny-deepseek-vl2/tokenizer.json
  tests/fixtures/tiny-deepseek-vl2/tokenizer_config.json
  tests/fixtures/tiny-deepseek-vl2-mla/model-00001-of-000001.safetensors
  tests/fixtures/tiny-deepseek-vl2-mla/model.safetensors.index.json
  tests/fixtures/golden/deepseek_vl2_logits.safetensors
  tests/fixtures/golden/deepseek_vl2_mla_logits.safetensors
  tests/fixtures/golden/deepseek_vl2_pixel_values.safetensors
  tests/fixtures/golden/deepseek_vl2_vision.safetensors
  tests/fixtures/golden/deepseek_vl2_mla_vision.safetensors
)
exclude=.git/info/exclude
marker="# travel_light.sh"
case "${1:-}" in
  hide)
    git rm -r -q --cached -- "${paths[@]}"
    for p in "${paths[@]}"; do echo "/$p $marker"; done | sed 's/ #.*//' >>"$exclude"
    echo "$marker end" >>"$exclude"
    ;;
  restore)
    for p in "${paths[@]}"; do
      grep -vxF "/$p" "$exclude" >"$exclude.tmp" || true
      mv "$exclude.tmp" "$exclude"
    done
    grep -vxF "$marker end" "$exclude" >"$exclude.tmp" || true
    mv "$exclude.tmp" "$exclude"
    git reset -q -- "${paths[@]}"
    ;;
  size) ;;
  *)
    echo "usage: $0 hide | restore | size" >&2
    exit 2
    ;;
esac
# What would travel: tracked + untracked-not-ignored files, and the bundle.
{ git ls-files -z --cached --others --exclude-standard; printf '.gpu-bundle.tgz\0'; } |
  xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {printf "would travel: %.1f MiB\n", s / 1048576}'
