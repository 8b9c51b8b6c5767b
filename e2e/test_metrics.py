"""Metrics that tell the truth, through the real Envoy and two ext-authz replicas: a shadow
rule's would-be refusals are counted under the rule while every call is admitted, and the
response path observes the prompt estimate's error, labelled by the decision's exactness (which
reaches it in the forwarded ext_authz metadata), and the use of the reserved output."""

from __future__ import annotations

import time

import openai

import harness as h
import scenarios as sc

CALLS = 3


def _lines(stack: h.Stack, name: str) -> list[str]:
    out = []
    for i in range(stack.replicas):
        for line in h.http_get(f"http://127.0.0.1:{stack.ports[f'admin-{i}']}/metrics")[1].decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                out.append(line)
    return out


def _sum(lines: list[str], *parts: str) -> float:
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines if all(p in x for p in parts))


def test_shadow_refusals_and_estimate_error_are_counted(tmp_path):
    # Each call costs its prompt and 16 reserved output tokens, about 25: the shadow budget of 40
    # admits the first and would refuse the next.
    rules = """  - name: enforced
    match: {provider: openai}
    tokens: {limit: 1000000, period: minute}
  - name: trial
    match: {provider: openai}
    tokens: {limit: 40, period: minute}
    shadow: true"""
    stack = h.Stack("metrics", tmp_path / "metrics", sc.limits_yaml(rules),
                    ["-openai-tpm", "100000000", "-latency", "10ms", "-completion-tokens", "8"])
    try:
        stack.up()
        oa = openai.OpenAI(api_key="sk-metrics", base_url="http://api.openai.com/v1", max_retries=0,
                           http_client=openai.DefaultHttpxClient(proxy=stack.proxy, trust_env=False))
        for _ in range(CALLS):
            oa.chat.completions.create(model=sc.OPENAI_MODEL, max_tokens=16,
                                       messages=[{"role": "user", "content": "Say hello"}])
        # Settlement follows each response on its own stream: wait for all of them.
        deadline = time.time() + 10
        while _sum(_lines(stack, "llm_ratelimit_output_use_ratio_count")) < CALLS and time.time() < deadline:
            time.sleep(0.2)
        shadow = _lines(stack, "llm_ratelimit_shadow_decisions_total")
        prompt = _lines(stack, "llm_ratelimit_prompt_estimate_ratio_count")
        output = _lines(stack, "llm_ratelimit_output_use_ratio_count")
        rules_seen = _lines(stack, "llm_ratelimit_rule_decisions_total")
    finally:
        stack.down()
    # Every call was admitted (the SDK raised on none); the shadow rule would have refused some.
    assert _sum(shadow, 'rule="trial"', 'outcome="allowed"') >= 1, shadow
    assert _sum(shadow, 'rule="trial"', 'outcome="denied"', 'limit="tokens"') >= 1, shadow
    assert _sum(shadow) == CALLS, shadow
    assert not any('rule="enforced"' in x for x in shadow), shadow
    # The real decision is still the request's: allowed, for the shadow rule too.
    assert _sum(rules_seen, 'rule="trial"', 'decision="allowed"') == CALLS, rules_seen
    # A chat prompt is counted exactly, and the metadata says so to the response path.
    assert _sum(prompt, 'provider="openai"', 'exact="true"') == CALLS, prompt
    assert _sum(output, 'provider="openai"') == CALLS, output
