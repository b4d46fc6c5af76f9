#!/usr/bin/env python3
"""The trained VQA model's eval set through vismoe-bench(-lite), compared with transformers.

  vqa_eval.py requests EVAL.jsonl OUT.jsonl
      vismoe-bench's request set for vismoe-eval's format: one user message, the picture
      first, then the question + BuildEvalPrompt's suffix (client/eval_set.cc), 16 new tokens.
  vqa_eval.py compare BENCH.json ANSWERS.jsonl [OUT.txt]
      Compares each request's text (and ids, EOS aside) with transformers' recorded answers
      (tests/fixtures/vqa-eval/direct/transformers_answers.jsonl); prints the count of equal
      answers and every difference. Exit 1 when one differs or a request is missing.
Standard library only: it runs on the GPU machine beside the bundle."""
import json
import os
import sys

SUFFIX = "\nAnswer the question using a single word or phrase."


def requests(eval_path, out_path):
    base = os.path.dirname(os.path.abspath(eval_path))
    with open(eval_path) as f, open(out_path, "w") as out:
        for line in f:
            if not line.strip():
                continue
            item = json.loads(line)
            req = {"prompt": item["question"] + SUFFIX, "max_new_tokens": 16}
            if item.get("image"):
                req["images"] = [os.path.join(base, item["image"])]
            out.write(json.dumps(req) + "\n")


def compare(bench_path, answers_path, out_path=None):
    ours = json.load(open(bench_path))["per_request"]
    theirs = [json.loads(l) for l in open(answers_path) if l.strip()]
    lines, same = [], 0
    for a, b in zip(theirs, ours):
        ids = list(a["token_ids"])
        if len(ids) == len(b["token_ids"]) + 1:  # transformers keeps the EOS it produced
            ids = ids[:-1]
        if a["prediction"] == b["text"] and ids == b["token_ids"]:
            same += 1
        else:
            lines.append(f"#{a['index']}: transformers {a['prediction']!r} {a['token_ids']}, "
                         f"ours {b['text']!r} {b['token_ids']}")
    missing = len(theirs) - len(ours)
    lines.insert(0, f"{same} of {len(theirs)} answers identical to transformers'"
                 + (f"; {missing} requests missing" if missing else ""))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if out_path:
        open(out_path, "w").write(text)
    return 0 if same == len(theirs) else 1


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "requests":
        requests(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
    else:
        sys.exit(__doc__)
