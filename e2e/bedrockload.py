"""One client process of e2e/test_bedrock.py: boto3's bedrock-runtime client, through the proxy,
calling Converse and InvokeModelWithResponseStream in turn from several threads until a
deadline, with botocore's own retries (standard mode). Writes a JSON summary of what it saw.

The client names the real endpoint (endpoint_url http://bedrock-runtime.us-east-1.amazonaws.com)
and reaches it through the proxy (Config proxies): SigV4 signs that host, Envoy routes on it
(the absolute URL becomes :authority) and forwards it unchanged. The credentials are fake: the
mock provider reads no signature.
"""

from __future__ import annotations

import argparse
import json
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

import sdkload

ENDPOINT = "http://bedrock-runtime.us-east-1.amazonaws.com"


def client(proxy: str, attempts: int):
    cfg = Config(region_name="us-east-1", proxies={"http": proxy}, connect_timeout=5, read_timeout=120,
                 retries={"mode": "standard", "max_attempts": attempts}, max_pool_connections=32)
    return boto3.client("bedrock-runtime", endpoint_url=ENDPOINT, aws_access_key_id="AKIDEXAMPLE",
                        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", config=cfg)


def converse(c, model: str, max_tokens: int, text: str) -> int:
    r = c.converse(modelId=model, messages=[{"role": "user", "content": [{"text": text}]}],
                   system=[{"text": "You are a test client. Answer briefly."}],
                   inferenceConfig={"maxTokens": max_tokens})
    return r["usage"]["outputTokens"]


def invoke_stream(c, model: str, max_tokens: int, text: str) -> int:
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": max_tokens,
            "system": "You are a test client. Answer briefly.", "messages": [{"role": "user", "content": text}]}
    r = c.invoke_model_with_response_stream(modelId=model, body=json.dumps(body), contentType="application/json")
    out = 0
    for ev in r["body"]:
        chunk = json.loads(ev["chunk"]["bytes"])
        if chunk.get("type") == "message_stop":
            out = chunk["amazon-bedrock-invocationMetrics"]["outputTokenCount"]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--start-at", type=float, default=0)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--name", default="bedrock")
    a = ap.parse_args(argv)
    c = client(a.proxy, a.attempts)

    def throttled(e: Exception) -> str | None:
        if isinstance(e, ClientError):
            return None if e.response["Error"]["Code"] == "ThrottlingException" else str(e)
        return repr(e)

    sdkload.run(a.name, {"converse": lambda text: converse(c, a.model, a.max_tokens, text),
                         "invoke_stream": lambda text: invoke_stream(c, a.model, a.max_tokens, text)},
                "output_tokens", a.threads, a.start_at, a.duration, a.out, throttled,
                lambda i, n: f"{a.name} thread {i} call {n}: name a river of Europe and say one thing about it.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
