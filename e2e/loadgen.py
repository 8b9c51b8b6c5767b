"""One OS process of Python workers calling through Envoy with the official openai SDK (with
--provider azure its AzureOpenAI client; with --provider anthropic, the anthropic SDK): a thread
pool sharing one client, like Celery or Gunicorn workers. Each call relies on the SDK's own retries (max_retries=2 by default, honouring
retry-after-ms); a call ends in success, a clean rate-limit error, a 413 (APIStatusError) or
anything else, which is counted as an error with samples. Writes a JSON summary shaped like
e2e/goclient's, with the times the first and the last successful call ended.

    python e2e/loadgen.py --proxy http://127.0.0.1:PORT --key sk-py0 --threads 4 --duration 75
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path

import anthropic
import openai

import clientnet

# Text appended to a prompt by --pad-bytes: ordinary words, numbered so that no two lines are alike.
_PAD_LINE = "Line {i}: the quarterly report lists revenue, costs and the outlook for each region.\n"


def _padded(text: str, n: int) -> str:
    lines, i = [text, "\n"], 0
    size = len(text) + 1
    while size < n:
        line = _PAD_LINE.format(i=i)
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)


# The Azure OpenAI resource of envoy/envoy.yaml, and an API version Azure serves
# (learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle).
AZURE_ENDPOINT = "http://your-resource-name.openai.azure.com"
AZURE_API_VERSION = "2024-10-21"

# The long system prompt of --cache-every calls: 2,200 tokens in cl100k_base (2,750 as the mock
# counts Claude's), above the 2,048-token minimum of a cached prefix on Claude Sonnet 4.6.
CACHED_SYSTEM = " ".join(f"Rule {i}: answer briefly, cite the policy section {i}, and never invent a figure." for i in range(110))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True, help="Envoy's listener, used as an HTTP proxy")
    ap.add_argument("--key", default="sk-e2e-python")
    ap.add_argument("--name", default="python")
    ap.add_argument("--provider", choices=("openai", "azure", "anthropic"), default="openai")
    ap.add_argument("--model", default="gpt-4o-mini", help="the model (with --provider azure: the deployment)")
    ap.add_argument("--pad-bytes", type=int, default=0, help="pad each user prompt with words to this many bytes")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--duration", type=float, default=60.0, help="start no call after this many seconds")
    ap.add_argument("--start-at", type=float, default=0.0, help="Unix time to start at")
    ap.add_argument("--ready", default="", help="create this file once the client is built (before waiting to start)")
    ap.add_argument("--start-file", default="",
                    help="wait (up to 5 minutes) for this file, which holds a Unix time, and start --start-offset "
                         "seconds after it (instead of --start-at)")
    ap.add_argument("--start-offset", type=float, default=0.0)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--stream-every", type=int, default=3, help="every n-th call of a thread streams (0: never)")
    ap.add_argument("--source", default="", help="local address to connect from (the shipped envoy.yaml names the tenant by it)")
    ap.add_argument("--tenant", default="", help="x-tenant-id header to send (the shipped envoy.yaml removes it)")
    ap.add_argument("--priority", default="", help="x-llm-priority header to send (the shipped envoy.yaml removes it)")
    ap.add_argument("--pace", type=float, default=0.0, help="seconds between the starts of a thread's calls")
    ap.add_argument("--burst-every", type=float, default=0.0,
                    help="start each call of a thread at the next multiple of this many seconds of the clock: "
                         "every thread of every process calls at once (0: back to back)")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--ramp", type=float, default=0.0, help="each thread starts after a random delay up to this")
    ap.add_argument("--max-retries", type=int, default=2)
    ap.add_argument("--prompts", default=str(Path(__file__).with_name("prompts.json")))
    ap.add_argument("--cache-every", type=int, default=0,
                    help="anthropic: every n-th call of a thread sends the shared long system prompt marked cache_control (0: never)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    prompts = json.loads(Path(a.prompts).read_text())["prompts"]
    headers = {}
    if a.tenant:
        headers["x-tenant-id"] = a.tenant
    if a.priority:
        headers["x-llm-priority"] = a.priority
    # Applications reach the provider's host through Envoy as their HTTP proxy.
    if a.provider == "openai":
        client = openai.OpenAI(
            api_key=a.key,
            base_url="http://api.openai.com/v1",
            max_retries=a.max_retries,
            timeout=60.0,
            default_headers=headers,
            # Plain HTTP to Envoy: no TLS, so no CA bundle to load (building the two default SSL
            # contexts cost 1.4 s of CPU per process, all three processes at once on 2 cores).
            http_client=openai.DefaultHttpx2Client(
                transport=clientnet.transport(a.proxy, a.source or None)),
        )
        rate_limited = openai.RateLimitError
        status_error = openai.APIStatusError
    elif a.provider == "azure":
        # The endpoint is the resource's own host, spoken in plain HTTP to Envoy as the proxy,
        # which originates TLS to Azure: AZURE_OPENAI_ENDPOINT=http://<resource>.openai.azure.com
        # with HTTP_PROXY, as for OpenAI. The SDK calls /openai/deployments/<model>/... with
        # ?api-version= and the key in api-key.
        client = openai.AzureOpenAI(
            api_key=a.key,
            azure_endpoint=AZURE_ENDPOINT,
            api_version=AZURE_API_VERSION,
            max_retries=a.max_retries,
            timeout=60.0,
            default_headers=headers,
            http_client=openai.DefaultHttpx2Client(
                transport=clientnet.transport(a.proxy, a.source or None)),
        )
        rate_limited = openai.RateLimitError
        status_error = openai.APIStatusError
    else:
        if a.source:
            ap.error("--source is for --provider openai")
        client = anthropic.Anthropic(
            api_key=a.key,
            base_url="http://api.anthropic.com",
            max_retries=a.max_retries,
            timeout=60.0,
            default_headers=headers,
            http_client=anthropic.DefaultHttpxClient(proxy=a.proxy, trust_env=False, verify=False),
        )
        rate_limited = anthropic.RateLimitError
        status_error = anthropic.APIStatusError

    def call(msgs: list[dict], stream: bool, cached: bool = False) -> bool:
        """One call; True when a streamed answer's last event carried the usage."""
        if a.provider == "anthropic":
            system = [m["content"] for m in msgs if m["role"] == "system"]
            kw = {"system": system[0]} if system else {}
            if cached:
                # A prefix every cached call shares: written once, then read (prompt caching).
                kw = {"system": [{"type": "text", "text": CACHED_SYSTEM, "cache_control": {"type": "ephemeral"}}]}
            user = [m for m in msgs if m["role"] != "system"]
            if stream:
                with client.messages.stream(model=a.model, max_tokens=a.max_tokens, messages=user, **kw) as st:
                    for _ in st:
                        pass
                    return st.get_final_message().usage.input_tokens > 0
            client.messages.create(model=a.model, max_tokens=a.max_tokens, messages=user, **kw)
            return False
        if stream:
            usage = False
            st = client.chat.completions.create(model=a.model, messages=msgs, max_tokens=a.max_tokens,
                                                stream=True, stream_options={"include_usage": True})
            for chunk in st:
                if chunk.usage is not None and chunk.usage.prompt_tokens > 0:
                    usage = True
            return usage
        client.chat.completions.create(model=a.model, messages=msgs, max_tokens=a.max_tokens)
        return False

    lock = threading.Lock()
    s = {"client": a.name, "provider": a.provider, "model": a.model, "key": a.key, "max_tokens": a.max_tokens,
         "workers": a.threads, "calls": 0, "ok": 0, "rate_limited": 0, "too_large": 0, "errors": 0,
         "error_samples": [], "calls_by_prompt": {}, "ok_by_prompt": {}, "streamed": 0, "stream_usage": 0,
         "first_ok": None, "last_ok": None}
    # streamed: successful streamed calls; stream_usage: those whose last chunk carried the usage.

    if a.ready:
        Path(a.ready).touch()
    if a.start_file:
        give_up = time.time() + 300
        while not Path(a.start_file).exists():
            if time.time() > give_up:
                print(f"loadgen: no {a.start_file} after 5 minutes", file=sys.stderr)
                return 1
            time.sleep(0.05)
        a.start_at = float(Path(a.start_file).read_text()) + a.start_offset
    if a.start_at > 0:
        time.sleep(max(0.0, a.start_at - time.time()))
    start = time.time()
    s["started"] = start
    deadline = start + a.duration

    def worker(w: int) -> None:
        if a.ramp > 0:
            time.sleep(random.uniform(0, a.ramp))
        i = 0
        while time.time() < deadline:
            if a.burst_every > 0:
                wait = a.burst_every - time.time() % a.burst_every
                if time.time() + wait >= deadline:
                    break
                time.sleep(wait)
            t_call = time.time()
            idx = (a.offset + w * 5 + i) % len(prompts)
            p = prompts[idx]
            stream = a.stream_every > 0 and i % a.stream_every == a.stream_every - 1
            user = _padded(p["user"], a.pad_bytes) if a.pad_bytes else p["user"]
            msgs = ([{"role": "system", "content": p["system"]}] if p.get("system") else []) + \
                   [{"role": "user", "content": user}]
            outcome, usage, err = "ok", False, None
            try:
                usage = call(msgs, stream, a.cache_every > 0 and i % a.cache_every == 0)
            except rate_limited:
                outcome = "rate_limited"
            except status_error as e:
                outcome = "too_large" if e.status_code == 413 else "errors"
                err = f"{type(e).__name__} {e.status_code}: {e.message}"
            except Exception as e:  # noqa: BLE001 - every other ending is counted and shown
                outcome, err = "errors", f"{type(e).__name__}: {e}"
            with lock:
                s["calls"] += 1
                s["calls_by_prompt"][str(idx)] = s["calls_by_prompt"].get(str(idx), 0) + 1
                s[outcome] += 1
                if outcome == "ok":
                    s["ok_by_prompt"][str(idx)] = s["ok_by_prompt"].get(str(idx), 0) + 1
                    now = time.time()
                    s["first_ok"] = now if s["first_ok"] is None else s["first_ok"]
                    s["last_ok"] = now
                if stream and outcome == "ok":
                    s["streamed"] += 1
                    s["stream_usage"] += int(usage)
                if err and len(s["error_samples"]) < 10:
                    s["error_samples"].append(err)
            i += 1
            if a.pace > 0:
                time.sleep(max(0.0, t_call + a.pace - time.time()))

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s["ended"] = time.time()
    Path(a.out).write_text(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
