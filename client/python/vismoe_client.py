#!/usr/bin/env python3
"""Minimal VisMoE client: streams one Generate call (see README.md for stub generation)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from vismoe.v1 import inference_pb2, inference_pb2_grpc  # noqa: E402


def sniff_media_type(data: bytes) -> str:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    raise ValueError("not a JPEG, PNG or WebP image")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--server", default="127.0.0.1:50051")
    p.add_argument("--prompt", required=True)
    p.add_argument("--image", action="append", default=[])
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--api-key", default=os.environ.get("VISMOE_API_KEY", ""))
    p.add_argument("--tls-ca", default="")
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args()

    user = inference_pb2.ChatMessage(role="user")
    for path in args.image:
        with open(path, "rb") as f:
            data = f.read()
        user.parts.add(image=inference_pb2.ImagePart(data=data, media_type=sniff_media_type(data)))
    user.parts.add(text=args.prompt)
    request = inference_pb2.GenerateRequest(
        messages=[user],
        sampling=inference_pb2.SamplingParams(max_new_tokens=args.max_new_tokens,
                                              temperature=args.temperature))

    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            channel = grpc.secure_channel(args.server, grpc.ssl_channel_credentials(f.read()))
    else:
        channel = grpc.insecure_channel(args.server)
    metadata = [("authorization", f"Bearer {args.api_key}")] if args.api_key else []
    stub = inference_pb2_grpc.InferenceServiceStub(channel)
    try:
        for response in stub.Generate(request, timeout=args.timeout, metadata=metadata):
            if response.HasField("delta"):
                sys.stdout.write(response.delta.text)
                sys.stdout.flush()
            else:
                final = response.final
                print(file=sys.stdout)
                print(f"finish={inference_pb2.FinishReason.Name(final.finish_reason)} "
                      f"prompt_tokens={final.usage.prompt_tokens} "
                      f"completion_tokens={final.usage.completion_tokens} "
                      f"ttft={final.timings.ttft_seconds:.3f}s "
                      f"hit_ratio={final.offload.hit_ratio:.3f} "
                      f"hot_recall={final.offload.hot_recall:.3f}", file=sys.stderr)
    except grpc.RpcError as e:
        code = e.code()
        if code == grpc.StatusCode.UNAVAILABLE:
            print(f"cannot reach server at {args.server}: {e.details()}", file=sys.stderr)
            return 3
        print(f"server at {args.server} returned {code.name}: {e.details()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
