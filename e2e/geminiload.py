"""One client process of e2e/test_gemini.py: the official google-genai SDK, through the proxy,
calling generate_content and generate_content_stream (server-sent events) in turn from several
threads until a deadline. Writes a JSON summary of what it saw.

The client names the real endpoint (base_url http://generativelanguage.googleapis.com, or with
--vertex http://us-central1-aiplatform.googleapis.com) and reaches it through the proxy
(http_options client_args proxy): Envoy routes on that host. The key and token are fake: the
mock provider checks neither.

google-genai does not retry by default (no HttpRetryOptions: one attempt,
google/genai/_api_client.py retry_args). With HttpRetryOptions it retries 408, 429 and 5xx
with exponential backoff and jitter (tenacity wait_exponential_jitter), reading neither
Retry-After nor RetryInfo. --attempts sets that option.
"""

from __future__ import annotations

import argparse
import sys

from google import genai
from google.genai import errors, types

import sdkload

GEMINI = "http://generativelanguage.googleapis.com"
VERTEX = "http://us-central1-aiplatform.googleapis.com"


def client(proxy: str, attempts: int, vertex: bool = False, max_delay: float = 8.0) -> genai.Client:
    retry = types.HttpRetryOptions(attempts=attempts, initial_delay=1.0, max_delay=max_delay) if attempts > 1 else None
    opts = types.HttpOptions(base_url=VERTEX if vertex else GEMINI, client_args={"proxy": proxy},
                             retry_options=retry, timeout=120_000)
    if vertex:
        from google.oauth2.credentials import Credentials

        return genai.Client(vertexai=True, project="mock-project", location="us-central1",
                            credentials=Credentials(token="mock-token"), http_options=opts)
    return genai.Client(api_key="mock-gemini-key", http_options=opts)


def config(max_tokens: int) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(max_output_tokens=max_tokens,
                                       system_instruction="You are a test client. Answer briefly.")


def generate(c: genai.Client, model: str, max_tokens: int, text: str) -> tuple[int, int]:
    r = c.models.generate_content(model=model, contents=text, config=config(max_tokens))
    return r.usage_metadata.prompt_token_count, r.usage_metadata.candidates_token_count


def stream(c: genai.Client, model: str, max_tokens: int, text: str) -> tuple[int, int]:
    last = None
    for chunk in c.models.generate_content_stream(model=model, contents=text, config=config(max_tokens)):
        last = chunk.usage_metadata
    return last.prompt_token_count, last.candidates_token_count


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--start-at", type=float, default=0)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--attempts", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="the prompt's sentence this many times")
    ap.add_argument("--vertex", action="store_true")
    ap.add_argument("--name", default="gemini")
    a = ap.parse_args(argv)
    c = client(a.proxy, a.attempts, a.vertex)

    def throttled(e: Exception) -> str | None:
        if isinstance(e, errors.APIError):
            return None if e.code == 429 else f"{e.code} {e.status}: {e.message}"
        return f"{type(e).__name__}: {e}"

    sdkload.run(a.name, {"generate": lambda text: generate(c, a.model, a.max_tokens, text)[0],
                         "stream": lambda text: stream(c, a.model, a.max_tokens, text)[0]},
                "prompt_tokens", a.threads, a.start_at, a.duration, a.out, throttled,
                lambda i, n: " ".join([f"{a.name} thread {i} call {n}: name a river of Europe and say one thing about it."] * a.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
