"""Requests that are no priced LLM call, through the real Envoy: a provider's unpriced API, and a
host that is no provider's, under each `unknown:` policy of the limits file.

- An unpriced API of a known provider (OpenAI's /v1/images/generations, sent by the official
  OpenAI SDK) is that provider's request: request rules count it, it takes no token budget, and
  its metadata says why (api "unpriced", estimate_reason "unpriced_api"). `unknown: deny` does not
  refuse it: it is a known provider's API.
- A host that is no provider's (llm.internal, a route this file adds to the derived Envoy config,
  as an operator adds one for a self-hosted server) is `unknown`:
  - `unknown: deny` refuses it with a 403 before any rule, counted as unknown_denied, and the
    mock never sees it;
  - `unknown: requests_only` lets request rules count it and no token rule: the fourth call of a
    rule of 3 a minute is refused, and two bodies of 2,000 tokens each pass a token rule of 3,000;
  - `unknown: allow` (the default) prices its body as raw text: the token rule of 3,000 refuses
    the second of those bodies.
Every decision is counted in llm_ratelimit_decisions_total with provider="unknown": never
silently unlimited.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.request

import pytest

import harness as h
import report as rpt
import scenarios as sc

RUN_DIR = rpt.REPORT_DIR / "run"
HOST = "llm.internal"
MOCK = ["-mode", "token_bucket", "-openai-tpm", "1000000", "-latency", "20ms", "-completion-tokens", "8"]


def _limits(policy: str) -> str:
    rules = """  - name: unknown-requests
    match: {path: "/generate*"}
    requests: {limit: 3, period: minute}
  - name: unknown-tokens
    match: {path: "/generate*"}
    tokens: {limit: 3000, period: minute}
  - name: openai-requests
    match: {provider: openai}
    requests: {limit: 4, period: minute}
  - name: openai-tokens
    match: {provider: openai}
    tokens: {limit: 100000, period: minute}"""
    return sc.limits_yaml(rules) + f"unknown: {policy}\n"


def _deviate(cfg: dict) -> dict:
    """The derived config plus a virtual host for a server that is no provider's, routed to the
    mock through the openai cluster (the derivation points every upstream at the mock)."""
    cfg = copy.deepcopy(cfg)
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["route_config"]["virtual_hosts"].append({
        "name": "internal-llm", "domains": [HOST],
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "openai", "timeout": "30s"}}]})
    return cfg


_up_lock = threading.Lock()


class _Stack(h.Stack):
    def up(self):
        """The harness's up() with this file's route added; stacks start one at a time."""
        with _up_lock:
            orig = h.derive_envoy_config
            h.derive_envoy_config = lambda *a, **k: _deviate(orig(*a, **k))
            try:
                return super().up()
            finally:
                h.derive_envoy_config = orig


def _post(stack: h.Stack, body: bytes) -> tuple[int, bytes]:
    """A POST to the internal host through Envoy as the HTTP proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": stack.proxy}))
    req = urllib.request.Request(f"http://{HOST}/generate", data=body, method="POST",
                                 headers={"content-type": "application/json", "authorization": "Bearer internal-key"})
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _images(stack: h.Stack) -> int:
    """One image generation through Envoy with the official SDK: the status it ended with."""
    import openai

    client = openai.OpenAI(api_key="sk-images", base_url="http://api.openai.com/v1", max_retries=0, timeout=10,
                           http_client=openai.DefaultHttpxClient(proxy=stack.proxy, trust_env=False))
    try:
        client.images.generate(model="gpt-image-1", prompt="A lighthouse at dawn.")
        return 200
    except openai.RateLimitError:
        return 429
    except openai.APIStatusError as e:
        return e.status_code


def _entries(stack: h.Stack, want: int, pred) -> list[dict]:
    """The access-log entries pred selects, once there are want of them (Envoy flushes its file
    on an interval)."""
    sel = lambda: [e for e in sc.access_log(stack) if pred(e)]  # noqa: E731
    h.wait_until(lambda: len(sel()) >= want, 15, "the access log", stack.procs["envoy"])
    return sel()


def _run(policy: str) -> dict:
    name = f"unknown-{policy}"
    stack = _Stack(name, RUN_DIR / name, _limits(policy), MOCK, replicas=2)
    out: dict = {"policy": policy}
    try:
        stack.up()
        small = json.dumps({"prompt": "Say hello."}).encode()
        big = json.dumps({"prompt": " hello" * 2000}).encode()  # 2,000 tokens of text and a few
        out["unknown"] = [_post(stack, b)[0] for b in (small, big, big, small)]
        unknown = _entries(stack, 4, lambda e: e.get("authority") == HOST)
        out["unknown_meta"] = [{k: sc.meta(e, k) for k in ("decision", "provider", "api", "cost")} for e in unknown]
        out["unknown_reached_mock"] = sum(1 for e in unknown if e.get("upstream_host") not in (None, "", "-"))
        out["images"] = [_images(stack) for _ in range(6)]
        images = _entries(stack, 6, lambda e: sc.meta(e, "api") == "unpriced")
        out["images_meta"] = [{k: sc.meta(e, k) for k in ("decision", "provider", "cost", "estimate_reason")}
                              for e in images]
        out["decisions_unknown"] = stack.metric("llm_ratelimit_decisions_total", 'provider="unknown"')
        out["unknown_denied"] = stack.metric("llm_ratelimit_decisions_total", 'decision="unknown_denied"')
    finally:
        stack.down()
    rpt.write_json(name, out)
    return out


@pytest.fixture(scope="module")
def runs() -> dict:
    return {p: _run(p) for p in ("deny", "requests_only", "allow")}


def test_an_unpriced_api_is_its_providers_request(runs):
    for policy, r in runs.items():
        # 4 requests a minute for openai: the first four reach the mock (which serves no image API:
        # 404), the next two are the limiter's 429, which the SDK reports as a rate limit.
        assert r["images"] == [404, 404, 404, 404, 429, 429], (policy, r)
        assert all(m["provider"] == "openai" and "unpriced_api" in str(m["estimate_reason"]) and not m["cost"]
                   for m in r["images_meta"]), (policy, r["images_meta"])


def test_unknown_deny_refuses_before_any_rule(runs):
    r = runs["deny"]
    assert r["unknown"] == [403, 403, 403, 403], r
    assert r["unknown_denied"] == 4 and r["decisions_unknown"] == 4, r
    assert r["unknown_reached_mock"] == 0, r


def test_unknown_requests_only_counts_requests_not_tokens(runs):
    r = runs["requests_only"]
    # Both big bodies pass (no token rule counts them); the fourth call is the requests rule's
    # fourth. The mock serves no /generate: 404 is an answer from upstream.
    assert r["unknown"] == [404, 404, 404, 429], r
    assert [m["decision"] for m in r["unknown_meta"]] == ["allowed", "allowed", "allowed", "denied"], r
    # The access log's cost is what the token buckets took: nothing.
    assert all(m["provider"] == "unknown" and m["cost"] == 0 for m in r["unknown_meta"]), r
    assert r["unknown_reached_mock"] == 3 and r["decisions_unknown"] == 4, r


def test_unknown_allow_prices_the_body_as_text(runs):
    r = runs["allow"]
    # The second big body does not fit in what the first left of 3,000 tokens; the small one
    # after it does (the refused call took nothing).
    assert r["unknown"] == [404, 404, 429, 404], r
    big = r["unknown_meta"][1]
    assert big["provider"] == "unknown" and big["cost"] and big["cost"] >= 2000, r
    assert r["unknown_reached_mock"] == 3 and r["decisions_unknown"] == 4, r
