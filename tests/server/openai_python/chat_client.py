"""Drives the server's OpenAI-compatible API with the official `openai` package
(pinned in requirements.txt) and with raw HTTP (urllib), for
tests/server/openai_python_e2e_test.cc.

    chat_client.py --base_url http://127.0.0.1:PORT/v1 --model NAME \
        --requests requests.json --out answers.json

requests.json: [{"image": PATH or null, "prompt": TEXT, "max_tokens": N}, ...]
answers.json: per request {"plain": {...}, "stream": {...}, "raw": {...}}, each
{"text", "finish_reason", "prompt_tokens", "completion_tokens"}.
"""
import argparse
import base64
import json
import urllib.request

import openai


def messages(req):
    content = []
    if req.get("image"):
        with open(req["image"], "rb") as f:
            data = base64.b64encode(f.read()).decode()
        content.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}})
    content.append({"type": "text", "text": req["prompt"]})
    return [{"role": "user", "content": content}]


def plain(client, model, req):
    r = client.chat.completions.create(model=model, messages=messages(req),
                                       max_tokens=req["max_tokens"], temperature=0)
    return {"text": r.choices[0].message.content, "finish_reason": r.choices[0].finish_reason,
            "prompt_tokens": r.usage.prompt_tokens,
            "completion_tokens": r.usage.completion_tokens}


def streamed(client, model, req):
    text, finish, usage = "", None, None
    stream = client.chat.completions.create(model=model, messages=messages(req),
                                            max_tokens=req["max_tokens"], temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return {"text": text, "finish_reason": finish, "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens}


def raw(base_url, model, req):
    body = json.dumps({"model": model, "messages": messages(req),
                       "max_tokens": req["max_tokens"]}).encode()
    http = urllib.request.Request(base_url + "/chat/completions", data=body,
                                  headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(http, timeout=120) as resp:
        r = json.load(resp)
    return {"text": r["choices"][0]["message"]["content"],
            "finish_reason": r["choices"][0]["finish_reason"],
            "prompt_tokens": r["usage"]["prompt_tokens"],
            "completion_tokens": r["usage"]["completion_tokens"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base_url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--requests", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=120)
    with open(args.requests) as f:
        reqs = json.load(f)
    answers = [{"plain": plain(client, args.model, r), "stream": streamed(client, args.model, r),
                "raw": raw(args.base_url, args.model, r)} for r in reqs]
    # The SDK maps the server's error bodies to its exception types.
    try:
        client.chat.completions.create(model=args.model, messages=messages(reqs[0]), n=2)
        bad_request = "no error"
    except openai.BadRequestError as e:
        bad_request = e.message
    try:
        client.chat.completions.create(model="gpt-4o", messages=messages(reqs[0]))
        not_found = "no error"
    except openai.NotFoundError as e:
        not_found = e.message
    models = [m.id for m in client.models.list()]
    with open(args.out, "w") as f:
        json.dump({"answers": answers, "bad_request": bad_request, "not_found": not_found,
                   "models": models, "openai_version": openai.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
