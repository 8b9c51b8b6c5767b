"""Google's hosts in other SDKs' dialects, through the real Envoy: Claude on Vertex AI with the
anthropic SDK's AnthropicVertex, and the Gemini API's OpenAI-compatible endpoint with the openai
SDK. A few calls each, not a load run.

The mock answers both under its Gemini accounting (e2e/mockprovider/googlecompat.go):
rawPredict and streamRawPredict with an Anthropic Messages body and usage, the compatible
endpoint with an OpenAI chat completion (a usage chunk when stream_options asks). The limiter
must name the provider from the host (vertex, gemini), the API from the path (messages,
chat_completions) and, on Vertex, the model from the path; a rule of that provider refuses the
call after its limit, and the SDK raises its own RateLimitError; every answer settles to the
usage it reports.

The refusal's body: for Claude on Vertex it is Google's google.rpc.Status (RESOURCE_EXHAUSTED),
as Vertex AI answers its own quota 429s for partner models; the anthropic SDK raises
RateLimitError on the status alone (anthropic/_client.py, _make_status_error) and keeps the
body. For the OpenAI-compatible endpoint it is OpenAI's error, which the openai SDK parses.
"""

from __future__ import annotations


import pytest

import harness as h
import scenarios as sc

CLAUDE = "claude-sonnet-4-5@20250929"
GEMINI = "gemini-2.5-flash"
LIMIT = 3  # requests a minute the rule allows
MOCK = ["-latency", "50ms", "-completion-tokens", "12"]


def _rule(name: str, match: str) -> str:
    return f"""  - name: {name}
    match: {match}
    per: [model]
    requests: {{limit: {LIMIT}, period: minute}}
    output_tokens: {{limit: 100000, period: minute}}
    refund: true
"""


def _lines(stack: h.Stack) -> list[str]:
    """Every replica's metrics lines: Envoy sends each response's ext_proc stream to either."""
    out = []
    for i in range(stack.replicas):
        out += h.http_get(f"http://127.0.0.1:{stack.ports[f'admin-{i}']}/metrics")[1].decode().splitlines()
    return out


def _settled(stack: h.Stack, provider: str, n: int) -> tuple[float, float]:
    """Waits for n responses of provider settled from their usage; returns those and the output
    tokens refunded."""
    def usage() -> float:
        return stack.metric("llm_ratelimit_reconciled_responses_total", f'provider="{provider}"', 'result="usage"')
    try:
        h.wait_until(lambda: usage() >= n, 20, f"{n} {provider} responses settled from usage")
    except TimeoutError:
        raise AssertionError([x for x in _lines(stack) if x.startswith("llm_ratelimit_reconcile")]) from None
    refund = stack.metric("llm_ratelimit_reconciled_tokens_total", 'dimension="output_tokens"', 'direction="refund"', f'provider="{provider}"')
    return usage(), refund


def _log(stack: h.Stack, n: int) -> list[dict]:
    h.wait_until(lambda: len(sc.access_log(stack)) >= n, 10, f"{n} access-log lines")  # flushed every 250 ms
    return sc.access_log(stack)


def test_claude_on_vertex_with_anthropic_vertex(tmp_path):
    import anthropic
    from anthropic import AnthropicVertex

    rules = _rule("vertex-claude", '{provider: vertex, model: "claude-*"}')
    stack = h.Stack("vertex-claude", tmp_path / "vertex-claude", sc.limits_yaml(rules), MOCK)
    try:
        stack.up()
        c = AnthropicVertex(region="us-central1", project_id="mock-project", access_token="test",
                            base_url="http://us-central1-aiplatform.googleapis.com/v1", max_retries=0,
                            http_client=anthropic.DefaultHttpxClient(proxy=stack.proxy, trust_env=False))
        msgs = [{"role": "user", "content": "Name a river of Europe."}]
        m = c.messages.create(model=CLAUDE, max_tokens=200, messages=msgs)
        assert m.usage.output_tokens == 12 and m.usage.input_tokens > 0, m
        with c.messages.stream(model=CLAUDE, max_tokens=200, messages=msgs) as st:
            final = st.get_final_message()
        assert final.usage.output_tokens == 12, final
        m = c.messages.create(model=CLAUDE, max_tokens=200, messages=msgs)
        assert m.usage.output_tokens == 12, m
        with pytest.raises(anthropic.RateLimitError) as e:
            c.messages.create(model=CLAUDE, max_tokens=200, messages=msgs)
        err = e.value
        assert err.status_code == 429 and int(err.response.headers["retry-after"]) >= 1, err.response.headers
        body = err.response.json()
        assert body["error"]["status"] == "RESOURCE_EXHAUSTED" and body["error"]["code"] == 429, body

        recs = h.read_jsonl(stack.records_path)
        assert [(r["provider"], r["api"], r["model"], r["stream"] if "stream" in r else False, r["status"]) for r in recs] == [
            ("vertex", "messages", CLAUDE, False, 200), ("vertex", "messages", CLAUDE, True, 200),
            ("vertex", "messages", CLAUDE, False, 200)], recs
        log = _log(stack, 4)
        seen = [(sc.meta(x, "provider"), sc.meta(x, "api"), sc.meta(x, "model"), sc.meta(x, "decision")) for x in log]
        assert seen == [("vertex", "messages", CLAUDE, "allowed")] * 3 + [("vertex", "messages", CLAUDE, "denied")], log
        # Priced: the 200 output tokens asked for are reserved, and some input estimated.
        assert all(int(float(sc.meta(x, "output_tokens"))) == 200 and int(float(sc.meta(x, "prompt_tokens"))) > 0
                   for x in log[:3]), log
        n, refund = _settled(stack, "vertex", 3)
        # Settled from the Anthropic usage (12 of 200 output tokens): 188 given back a call.
        assert n == 3 and refund == 3 * (200 - 12), (n, refund)
        assert stack.metric("llm_ratelimit_reconciled_responses_total", 'provider="vertex"', 'result="no_usage"') == 0
        print(f"\nvertex-claude: {seen}; settled {n:.0f}, output refunded {refund:.0f}")
    finally:
        stack.down()


def test_gemini_openai_compatible_endpoint_with_the_openai_sdk(tmp_path):
    import openai

    rules = _rule("gemini-per-model", "{provider: gemini}")
    stack = h.Stack("gemini-compat", tmp_path / "gemini-compat", sc.limits_yaml(rules), MOCK)
    try:
        stack.up()
        c = openai.OpenAI(api_key="mock-gemini-key", base_url="http://generativelanguage.googleapis.com/v1beta/openai/",
                          max_retries=0, http_client=openai.DefaultHttpxClient(proxy=stack.proxy, trust_env=False))
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a river of Europe."}]
        r = c.chat.completions.create(model=GEMINI, max_tokens=200, messages=msgs)
        assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 0, r
        usage = None
        for chunk in c.chat.completions.create(model=GEMINI, max_tokens=200, messages=msgs, stream=True,
                                               stream_options={"include_usage": True}):
            usage = chunk.usage or usage
        assert usage is not None and usage.completion_tokens == 12, usage
        r = c.chat.completions.create(model=GEMINI, max_tokens=200, messages=msgs)
        assert r.usage.completion_tokens == 12, r
        with pytest.raises(openai.RateLimitError) as e:
            c.chat.completions.create(model=GEMINI, max_tokens=200, messages=msgs)
        err = e.value
        assert err.status_code == 429 and int(err.response.headers["retry-after"]) >= 1, err.response.headers
        assert isinstance(err.body, dict) and err.body.get("type") and err.body.get("message"), err.body

        recs = h.read_jsonl(stack.records_path)
        assert [(r["provider"], r["api"], r["model"], r["status"]) for r in recs] == [
            ("gemini", "chat_completions", GEMINI, 200)] * 3, recs
        log = _log(stack, 4)
        seen = [(sc.meta(x, "provider"), sc.meta(x, "api"), sc.meta(x, "model"), sc.meta(x, "decision")) for x in log]
        assert seen == [("gemini", "chat_completions", GEMINI, "allowed")] * 3 + [("gemini", "chat_completions", GEMINI, "denied")], log
        n, refund = _settled(stack, "gemini", 3)
        assert n == 3 and refund == 3 * (200 - 12), (n, refund)
        print(f"\ngemini-compat: {seen}; settled {n:.0f}, output refunded {refund:.0f}")
    finally:
        stack.down()
