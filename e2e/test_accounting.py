"""Counting the way the provider counts: Anthropic's input, output and request limits.

The mock provider runs Anthropic's own accounting (-anthropic-itpm/-otpm/-rpm,
e2e/mockprovider/anthropic.go: ITPM counts input and cache writes, not cache reads; OTPM is
charged max_tokens and adjusted to the output at the end; a cache_control prefix is written once,
then read), three Anthropic SDK processes drive it through the real Envoy and two ext-authz
replicas at several times its limits, half the calls reusing a cached system prefix. The limiter
runs the matching rule (input_tokens, output_tokens, requests at the mock's own limits) and, as
the control, a single `tokens` budget of the same size: the provider's own count says which one
uses what it allows.
"""

from __future__ import annotations

import pytest

import harness as h
import loadgen
import report as rpt
import scenarios as sc

ITPM, OTPM, RPM = 40_000, 8_000, 1_000
DURATION = 45.0
MODEL = sc.ANTHROPIC_MODEL


def _admitted(recs: list[dict], summaries: list[dict], duration: float = DURATION) -> tuple[list[dict], float]:
    """The provider's admissions while every client is calling (from the first admission to the
    first client's deadline: the SDKs' last retries after it are no demand), and their span."""
    end = min(x["started"] for x in summaries) + duration
    ok = sorted((r for r in recs if r["status"] == 200 and r["t"] <= end), key=lambda r: r["t"])
    return ok, (ok[-1]["t"] - ok[0]["t"] if len(ok) > 1 else 0.0)


def _run(workdir, name: str, rules: str) -> dict:
    stack = h.Stack(name, workdir / name, sc.limits_yaml(rules),
                    ["-anthropic-itpm", str(ITPM), "-anthropic-otpm", str(OTPM), "-anthropic-rpm", str(RPM),
                     "-latency", "200ms", "-completion-tokens", "16"])
    try:
        stack.up()
        python = [{"provider": "anthropic", "model": MODEL, "key": f"sk-acct-{i}", "threads": 4, "max_tokens": 64,
                   "stream_every": 2, "cache_every": 2, "offset": 5 * i, "ramp": 2} for i in range(3)]
        summaries = sc.run_load(stack, name, DURATION, python=python)
        recs = [r for r in h.read_jsonl(stack.records_path) if r["provider"] == "anthropic"]
        expected = stack.metric("llm_ratelimit_cache_read_tokens_expected_total")
    finally:
        stack.down()
    ok, span = _admitted(recs, summaries)
    itpm = sum(r.get("itpm", 0) for r in ok)
    return {
        "provider_429": sum(1 for r in recs if r["status"] == 429),
        "ok": len(ok),
        "cache_reads": sum(1 for r in ok if r.get("cache_read")),
        "cache_writes": sum(1 for r in ok if r.get("cache_write")),
        "expected_reads": expected,
        "itpm_counted": itpm,
        "otpm_counted": sum(r.get("otpm", 0) for r in ok),
        "span_s": round(span, 3),
        "itpm_allowance": round(rpt.allowance("token_bucket", ITPM, sc.PERIOD, span)),
        "itpm_used": round(itpm / rpt.allowance("token_bucket", ITPM, sc.PERIOD, span), 4) if span else 0.0,
        "client": sc.client_totals(summaries),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("accounting")
    m = 1.0  # at the provider's own limits: nothing held back
    dims = f"""  - name: claude
    match: {{provider: anthropic}}
    per: [model]
    input_tokens: {{limit: {int(ITPM * m)}, period: minute}}
    output_tokens: {{limit: {int(OTPM * m)}, period: minute}}
    requests: {{limit: {int(RPM * m)}, period: minute}}"""
    single = f"""  - name: claude
    match: {{provider: anthropic}}
    per: [model]
    tokens: {{limit: {int(ITPM * m)}, period: minute}}"""
    out = {"dimensions": _run(workdir, "accounting-dimensions", dims), "single": _run(workdir, "accounting-single", single)}
    rpt.write_json("accounting", out)
    return out


def test_anthropic_dimensions_use_the_provider_allowance_without_429(runs):
    d = runs["dimensions"]
    assert d["client"]["errors"] == 0, d["client"]
    assert d["cache_reads"] > 0 and d["cache_writes"] > 0, d
    # Demand far above the limits: the clients were refused by the limiter, never the provider.
    assert d["client"]["rate_limited"] > 0, d
    assert d["provider_429"] == 0, d
    # The binding dimension, input tokens counted the provider's way, near what the provider
    # allows. Admission expects the cached prefix to be read once an admitted call sent it
    # (internal/promptcache) and does not reserve it; what the run leaves unused is the input
    # estimate's margin on the reservations in flight, given back when each settles.
    assert d["expected_reads"] > 0, d
    assert d["itpm_used"] >= 0.95, d


def test_a_single_tokens_budget_wastes_what_the_provider_allows(runs):
    d, s = runs["dimensions"], runs["single"]
    # A single budget counts max_tokens with the input and keeps what admission reserved (no
    # Anthropic limit settles a combined count): the same limit admits far less of what the
    # provider allows.
    assert s["provider_429"] == 0, s
    assert s["itpm_used"] < d["itpm_used"] - 0.2, (s, d)


def test_spend_cap_is_reported_never_paused_and_reaches_the_client(tmp_path):
    """A 429 without retry-after (the mock's spend limit): the client gets the provider's answer
    unchanged, the limiter counts it as spend_cap and pauses no bucket: its next checks admit."""
    import anthropic

    rules = f"""  - name: claude
    match: {{provider: anthropic}}
    input_tokens: {{limit: {ITPM}, period: minute}}
    output_tokens: {{limit: {OTPM}, period: minute}}"""
    stack = h.Stack("spend-cap", tmp_path / "spend-cap", sc.limits_yaml(rules),
                    ["-anthropic-itpm", str(ITPM), "-anthropic-otpm", str(OTPM), "-anthropic-spend-cap", "300",
                     "-latency", "10ms"])
    try:
        stack.up()
        an = anthropic.Anthropic(api_key="sk-spend", base_url="http://api.anthropic.com", max_retries=0,
                                 http_client=anthropic.DefaultHttpxClient(proxy=stack.proxy, trust_env=False))
        first = an.messages.with_raw_response.create(model=MODEL, max_tokens=300, messages=[{"role": "user", "content": "hi"}])
        assert first.status_code == 200
        refused = []
        for _ in range(3):
            try:
                an.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
            except anthropic.RateLimitError as e:
                refused.append(e)
        assert len(refused) == 3, refused
        for e in refused:
            # The provider's own answer: its message, no retry-after (the limiter adds none).
            assert "monthly spend limit" in e.message, e.message
            assert e.response.headers.get("retry-after") is None, dict(e.response.headers)
        h.wait_until(lambda: stack.metric("llm_ratelimit_provider_corrections_total", 'kind="spend_cap"') >= 3, 10,
                     "spend_cap corrections", stack.replica(0))
        assert stack.metric("llm_ratelimit_provider_corrections_total", 'kind="pause"') == 0
        recs = h.read_jsonl(stack.records_path)
        # Every refused call reached the provider: the limiter's buckets were not paused.
        assert [r["which"] for r in recs if r["status"] == 429] == ["spend_cap"] * 3, recs
    finally:
        stack.down()


TPM = 40_000


def _run_openai(workdir, name: str, accounting: str, duration: float = DURATION) -> dict:
    rules = f"""  - name: openai-per-model
    match: {{provider: openai}}
    per: [model]
    tokens: {{limit: {int(TPM * sc.MARGIN)}, period: minute}}"""
    limits = sc.limits_yaml(rules) + accounting
    stack = h.Stack(name, workdir / name, limits,
                    ["-openai-tpm", str(TPM), "-openai-counting", "max_of_chars", "-latency", "200ms", "-completion-tokens", "16"])
    try:
        stack.up()
        # Long prompts, short answers: the characters decide the provider's count.
        python = [{"key": f"sk-chars-{i}", "threads": 4, "max_tokens": 32, "model": sc.OPENAI_MODEL, "pad_bytes": 3000,
                   "stream_every": 2, "offset": 3 * i, "ramp": 2} for i in range(3)]
        summaries = sc.run_load(stack, name, duration, python=python)
        recs = [r for r in h.read_jsonl(stack.records_path) if r["provider"] == "openai"]
    finally:
        stack.down()
    ok, span = _admitted(recs, summaries, duration)
    allowance = rpt.allowance("token_bucket", TPM, sc.PERIOD, span)
    return {"provider_429": sum(1 for r in recs if r["status"] == 429), "ok": len(ok), "span_s": round(span, 3),
            "counted": sum(r["cost"] for r in ok), "used": round(sum(r["cost"] for r in ok) / allowance, 4) if span else 0.0,
            "client": sc.client_totals(summaries)}


def test_openai_character_rule_with_its_profile(tmp_path):
    """The mock counts OpenAI requests by the guide's character rule. With the matching profile
    (accounting: max_of_chars) the limiter holds it: no provider 429, the budget used; with the
    default sum (prompt + max_tokens), which counts these prose prompts lower than their
    characters / 4, the two disagree and the provider refuses what the limiter let through."""
    matching = _run_openai(tmp_path, "chars-matching", "accounting:\n  - {provider: openai, counting: max_of_chars}\n")
    # The control shows the disagreement in its first seconds: 20 s of it are enough.
    default = _run_openai(tmp_path, "chars-default", "", duration=20.0)
    rpt.write_json("accounting-openai", {"matching": matching, "default": default})
    assert matching["client"]["errors"] == 0, matching
    assert matching["client"]["rate_limited"] > 0, matching  # demand above the limit
    assert matching["provider_429"] == 0, matching
    assert matching["used"] >= 0.95, matching
    assert default["provider_429"] > 0, default


SETTLE_RULES = """  - name: claude
    match: {provider: anthropic}
    input_tokens: {limit: 1000000, period: minute}
    output_tokens: {limit: 1000000, period: minute}"""


def _settle_traffic(stack: h.Stack, accept: str | None) -> dict:
    """The same Anthropic calls, one after the other: JSON and streamed, a cached prefix written
    then read at once (reserved whole, given back), then read again after the warm-up (expected,
    not reserved). accept None is the SDK's default Accept-Encoding (gzip, deflate)."""
    import time

    import anthropic

    hdrs = {"Accept-Encoding": accept} if accept else None
    an = anthropic.Anthropic(api_key="sk-settle", base_url="http://api.anthropic.com", max_retries=0, default_headers=hdrs,
                             http_client=anthropic.DefaultHttpxClient(proxy=stack.proxy, trust_env=False))
    story = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]
    system = [{"type": "text", "text": loadgen.CACHED_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    an.messages.create(model=MODEL, max_tokens=200, messages=story)
    with an.messages.stream(model=MODEL, max_tokens=150, messages=story) as st:
        st.get_final_message()
    an.messages.create(model=MODEL, max_tokens=100, system=system, messages=story)
    with an.messages.stream(model=MODEL, max_tokens=100, system=system, messages=story) as st:
        st.get_final_message()
    time.sleep(2.5)  # past the prompt cache's warm-up: the prefix is expected to be read
    an.messages.create(model=MODEL, max_tokens=120, system=system, messages=story)
    with an.messages.stream(model=MODEL, max_tokens=80, system=system, messages=story) as st:
        st.get_final_message()
    n = 6
    h.wait_until(lambda: stack.metric("llm_ratelimit_reconciled_responses_total") >= n, 20, f"{stack.name}: settled")
    records = [r for r in h.read_jsonl(stack.records_path) if r.get("key") == "sk-settle"]
    entries: dict = {}

    def logged() -> bool:
        entries.update({e["request_id"]: e for e in sc.access_log(stack) if e.get("request_id")})
        return all(r["request_id"] in entries for r in records)
    h.wait_until(logged, 10, f"{stack.name}: every call in Envoy's access log")
    # The provider's ledger against what admission reserved, dimension by dimension.
    ledger = {"refund": {"input_tokens": 0, "output_tokens": 0}, "overage": {"input_tokens": 0, "output_tokens": 0}}
    provider = []
    for r in records:
        md = lambda k: int(float(sc.meta(entries[r["request_id"]], k) or 0))  # noqa: E731
        counted = {"input_tokens": r["itpm"], "output_tokens": r["usage"] - r["prompt"]}
        reserved = {"input_tokens": md("prompt_tokens") - md("cache_read_tokens"), "output_tokens": md("output_tokens")}
        for d in counted:
            ledger["refund"][d] += max(reserved[d] - counted[d], 0)
            ledger["overage"][d] += max(counted[d] - reserved[d], 0)
        provider.append({k: r.get(k, 0) for k in ("status", "input", "cache_write", "cache_read", "itpm", "usage")})

    def metric(direction: str, dim: str) -> float:
        return stack.metric("llm_ratelimit_reconciled_tokens_total", f'dimension="{dim}"', f'direction="{direction}"', 'provider="anthropic"')
    return {"calls": n, "provider": provider, "ledger": ledger,
            "expected_reads": [int(float(sc.meta(entries[r["request_id"]], "cache_read_tokens") or 0)) for r in records],
            "settled": {k: {d: metric(k, d) for d in ("input_tokens", "output_tokens")} for k in ("refund", "overage")},
            "decode_errors": stack.metric("llm_ratelimit_reconcile_errors_total")}


def test_compressed_replies_settle_each_dimension_like_plain_ones(tmp_path):
    """With the SDK's default Accept-Encoding the mock compresses every reply (gzip), like the
    real APIs; with identity it does not. The same calls settle the same refunds and charges in
    each dimension, and both are the provider's ledger to the token."""
    import concurrent.futures as cf

    flags = ["-anthropic-itpm", "1000000", "-anthropic-otpm", "1000000", "-anthropic-rpm", "100000", "-latency", "100ms"]
    stacks = {name: h.Stack(f"settle-{name}", tmp_path / name, sc.limits_yaml(SETTLE_RULES), flags) for name in ("gzip", "plain")}
    try:
        with cf.ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda s: s.up(), stacks.values()))
            futs = {name: pool.submit(_settle_traffic, s, None if name == "gzip" else "identity") for name, s in stacks.items()}
            res = {name: f.result(timeout=120) for name, f in futs.items()}
    finally:
        for s in stacks.values():
            s.down()
    rpt.write_json("accounting-compressed", res)
    gz, plain = res["gzip"], res["plain"]
    for r in (gz, plain):
        assert [p["status"] for p in r["provider"]] == [200] * r["calls"], r
        assert r["decode_errors"] == 0, r
        # The prefix was written once, read at once (reserved whole) and read after the warm-up
        # (expected: not reserved).
        assert sum(1 for p in r["provider"] if p["cache_write"]) == 1, r
        assert sum(1 for p in r["provider"] if p["cache_read"]) == 3, r
        assert sum(1 for x in r["expected_reads"] if x > 0) == 2, r
        # Refunds and overage in each dimension are the provider's ledger to the token.
        assert r["settled"] == r["ledger"], r
        assert r["ledger"]["refund"]["input_tokens"] > 0 and r["ledger"]["refund"]["output_tokens"] > 0, r
    # Compressed or not, the provider counted the same and the limiter settled the same.
    assert gz["provider"] == plain["provider"], (gz, plain)
    assert gz["settled"] == plain["settled"], (gz, plain)
