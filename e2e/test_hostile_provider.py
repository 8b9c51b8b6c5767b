"""The provider comes from the host: Claude called through Anthropic's OpenAI-compatible endpoint
(api.anthropic.com/v1/chat/completions, with the official OpenAI Python SDK, base URL
http://api.anthropic.com/v1, through the real Envoy on the shipped envoy.yaml and two ext-authz
replicas on one Redis) is Anthropic for every rule, so the Anthropic rule binds.

The limits file has one rule, Anthropic's: 5 requests a minute. The mock provider (which serves
that endpoint under its Anthropic limits, far above) records what it admitted.

Control: the same calls sent to api.openai.com. The path alone makes them OpenAI, which is what
the shipped recognition made of the Anthropic endpoint before the host decided (it priced by path
only): the Anthropic rule then never applies and every call reaches the provider."""

from __future__ import annotations

import openai
import pytest

import harness as h
import scenarios as sc

LIMIT = 5
CALLS = 8


def _calls(stack: h.Stack, base_url: str) -> tuple[int, list[openai.RateLimitError]]:
    ok, denied = 0, []
    http = openai.DefaultHttpx2Client(proxy=stack.proxy, trust_env=False)
    client = openai.OpenAI(api_key="sk-ant-hostile", base_url=base_url, http_client=http, max_retries=0, timeout=20)
    with client:
        for _ in range(CALLS):
            try:
                client.chat.completions.create(model=sc.ANTHROPIC_MODEL, max_tokens=20,
                                               messages=[{"role": "user", "content": "Hello"}])
                ok += 1
            except openai.RateLimitError as e:
                denied.append(e)
    return ok, denied


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    rules = f"""  - name: claude-org
    match: {{provider: anthropic}}
    requests: {{limit: {LIMIT}, period: minute}}"""
    s = h.Stack("hostile-provider", h.E2E / "report" / "run" / "hostile-provider", sc.limits_yaml(rules),
                ["-anthropic-tpm", "0", "-openai-tpm", "0", "-latency", "10ms"])
    try:
        yield s.up()
    finally:
        s.down()


def _admitted(stack: h.Stack, provider: str) -> int:
    return sum(1 for r in h.read_jsonl(stack.records_path)
               if r["provider"] == provider and r["status"] == 200 and r["api"] == "chat_completions")


def test_anthropic_openai_endpoint_is_anthropic(stack):
    ok, denied = _calls(stack, "http://api.anthropic.com/v1")
    assert ok == LIMIT and len(denied) == CALLS - LIMIT, (ok, len(denied))
    # The denial is in the OpenAI SDK's own format: it parsed the error body and the retry-after.
    e = denied[0]
    assert e.status_code == 429 and e.code == "rate_limit_exceeded", e.body
    assert "claude-org" in e.message and int(e.response.headers["retry-after"]) >= 1
    h.wait_until(lambda: _admitted(stack, "anthropic") == LIMIT, 10, "the mock's records")
    assert _admitted(stack, "anthropic") == LIMIT  # the provider saw only what the rule allows


def test_control_path_only_recognition(stack):
    """Against OpenAI's host the same calls are OpenAI's, and the Anthropic rule does not apply:
    what the Anthropic endpoint got when the path alone decided."""
    ok, denied = _calls(stack, "http://api.openai.com/v1")
    assert ok == CALLS and not denied, (ok, len(denied))
    h.wait_until(lambda: _admitted(stack, "openai") == CALLS, 10, "the mock's records")
