#!/usr/bin/env bash
# Seeds for the fuzz targets, from the test fixtures: copies them into
# <out>/<target>/ (default build/fuzz/seeds). The hand-made seeds and past
# crashes committed under tests/fuzz/corpus/<target>/ are used beside these
# (run_fuzzers.sh passes both). Files over 200 KB are left out: every
# mutation copies its input, so big seeds slow a target down for little.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-build/fuzz/seeds}"
fx=tests/fixtures
seed() {  # seed <target> <file>...: copy each file of at most 200 KB
  local target=$1 f
  shift
  rm -rf "${out:?}/$target"
  mkdir -p "$out/$target"
  for f in "$@"; do
    if [[ -f "$f" && $(stat -c %s "$f") -le 200000 ]]; then
      cp "$f" "$out/$target/$(echo "${f#"$fx"/}" | tr / _)"
    fi
  done
}
shopt -s nullglob
images=("$fx"/golden/images/* "$fx"/vqa-eval/img/000*.png tests/fuzz/corpus/image_decoder/*)
seed image_header "${images[@]}"
seed image_decoder "${images[@]}"
seed safetensors_header "$fx"/*/*.safetensors "$fx"/*/golden/*.safetensors
seed safetensors_index "$fx"/*/model.safetensors.index.json
seed tokenizer "$fx"/*/tokenizer.json
seed model_config "$fx"/*/config.json "$fx"/synthetic/*/config.json
seed chat_template  # inputs drive a FuzzedDataProvider: no file format to seed from
seed jinja "$fx"/chat_templates/*.jinja "$fx"/tiny-qwen3-vl-moe/chat_template.jinja
seed request
echo "seed_corpora: $(find "$out" -type f | wc -l) files in $out"
