"""The Gemini API and Vertex AI through the limiter, with the official google-genai SDK.

The mock provider runs Google's accounting (-gemini-tpm, -gemini-rpm, -gemini-rpd;
e2e/mockprovider/gemini.go): per model, requests per minute, tokens per minute counting the
input only, requests per Pacific day; a 429 is a google.rpc.Status RESOURCE_EXHAUSTED with
QuotaFailure and RetryInfo and no rate-limit headers. It counts a prompt with a stand-in of
Gemini's tokenizer (cl100k_base, plus 3 a turn); the limiter prices by its own estimate
(cl100k_base plus 4 a turn, times 1.25) and settles each request to the usageMetadata the
answer reports (refund: true), so that its input budget ends up counting what the provider
counted.

Routing: the SDK names the real endpoint (http_options base_url
http://generativelanguage.googleapis.com, or http://us-central1-aiplatform.googleapis.com with
vertexai=True) and reaches it through Envoy as its HTTP proxy (client_args proxy). Envoy routes
the gemini or vertex-ai virtual host on it, and the limiter recognises the provider from the
same :authority.

Retries: google-genai retries nothing unless told (no HttpRetryOptions: one attempt). The load
clients set HttpRetryOptions(attempts=3, initial_delay=1, max_delay=8): exponential backoff with
jitter on 429, which ignores Retry-After and RetryInfo. A call still refused after three attempts
ends in a clean 429 (ClientError RESOURCE_EXHAUSTED), counted as throttled.

The day: Redis's clock (TIME) is the limiter's, so the suite cannot move it to Pacific midnight.
The boundary itself (denied until 00:00 Pacific and no longer, 23- and 25-hour days) is proven by
internal/bucket's conformance tests (testQuotaZone) on every store, and the mock's by its own Go
tests (TestGeminiRPDResetsAtPacificMidnight). Here the limiter's daily quota in
America/Los_Angeles runs out and its refusal tells the SDK to come back at the next Pacific
midnight, to the second.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from zoneinfo import ZoneInfo

import pytest

import harness as h
import report as rpt
import scenarios as sc

MODEL = "gemini-2.5-flash"
TPM = 20_000  # input tokens a minute, the mock's
RPM = 600
DURATION = 40.0
PROCESSES, THREADS = 3, 8
MOCK = ["-gemini-tpm", str(TPM), "-gemini-rpm", str(RPM), "-latency", "200ms", "-completion-tokens", "40"]
PACIFIC = ZoneInfo("America/Los_Angeles")


def _rules(day_limit: int | None = None, provider: str = "gemini", dimension: str = "input_tokens") -> str:
    requests = f"{{limit: {int(RPM * sc.MARGIN)}, period: minute}}"
    if day_limit is not None:
        requests = f"[{requests}, {{limit: {day_limit}, period: day, algorithm: quota, timezone: America/Los_Angeles}}]"
    return f"""  - name: {provider}-per-model
    match: {{provider: {provider}}}
    per: [model]
    {dimension}: {{limit: {int(TPM * sc.MARGIN)}, period: minute}}
    requests: {requests}
    refund: true
"""


def _load(workdir, name: str, dimension: str) -> dict:
    """Three google-genai processes far above the mock's input TPM, the limiter's rule on
    dimension."""
    stack = h.Stack(name, workdir / name, sc.limits_yaml(_rules(dimension=dimension)), MOCK)
    try:
        stack.up()
        summaries = sc.sdk_clients(stack, "geminiload.py", PROCESSES, DURATION,
                                   ["--model", MODEL, "--threads", str(THREADS), "--max-tokens", "400", "--repeat", "20",
                                    "--attempts", "3"])
        stats = stack.mock_stats()
        recs = [r for r in h.read_jsonl(stack.records_path) if r["provider"] == "gemini"]
        log = sc.access_log(stack)
    finally:
        stack.down()
    begin = min(s["started"] for s in summaries)
    end = begin + DURATION
    ok = [r for r in recs if r["status"] == 200 and r["t"] <= end]
    counted = sum(r["input"] for r in ok)  # the mock's input count: what its TPM counted
    span = max(r["t"] for r in ok) - min(r["t"] for r in ok) if len(ok) > 1 else 0.0
    allowance = rpt.allowance("token_bucket", TPM, sc.PERIOD, span) if span else 0.0
    per_call = counted / len(ok) if ok else 0
    calls = sum(s["calls"] for s in summaries)
    out = {
        "provider_429": sum(1 for r in recs if r["status"] == 429),
        "mock_stats": stats["providers"].get("gemini", {}),
        "ok": len(ok),
        "streams": sum(1 for r in ok if r.get("stream")),
        "output_tokens": sum(r["usage"] - r["input"] for r in ok),
        **sc.sdk_totals(summaries),
        "limiter_denied": sum(1 for e in log if sc.meta(e, "decision") == "denied"),
        "limiter_priced": sorted({sc.meta(e, "provider") for e in log if sc.meta(e, "provider")}),
        "failed_open": sum(1 for r in recs if r.get("failure_mode_allowed")),
        "input_counted": counted,
        "span_s": round(span, 3),
        "allowance": round(allowance),
        "used": round(counted / allowance, 4) if allowance else 0.0,
        # What the clients asked for: every call (its retries not counted again) at the
        # provider's count of its input, over the allowance of the load's span.
        "demand_x": round(calls * per_call / max(allowance, 1), 2),
    }
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("gemini")
    out = {"input": _load(workdir, "gemini-input", "input_tokens"), "tokens": _load(workdir, "gemini-tokens", "tokens")}
    rpt.write_json("gemini", out)
    return out


def test_gemini_tpm_counts_input_and_the_limiter_keeps_under_it(runs):
    d = runs["input"]
    assert d["client_errors"] == 0, d
    assert d["limiter_priced"] == ["gemini"], d
    assert d["failed_open"] == 0, d
    assert d["streams"] > 0 and d["ok"] - d["streams"] > 0, d
    # Demand far above the allowance: the limiter refused, the provider never did.
    assert d["demand_x"] >= 3, d
    assert d["limiter_denied"] > 0, d
    assert d["provider_429"] == 0 and d["mock_stats"]["rate_limited"] == 0, d
    # The mock's TPM counts the input only; the output (40 a call, 400 reserved) never bound.
    assert d["output_tokens"] > 0, d
    # And it was used: the limiter's estimate (x1.25) settled to usageMetadata.promptTokenCount.
    assert d["used"] >= 0.95, d


def test_a_tokens_rule_counts_the_output_gemini_does_not(runs):
    """The control: the same budget on tokens (input plus output, settled to the usage) counts
    the 40 output tokens of each answer, which Gemini's TPM does not, and leaves part of the
    provider's allowance unused; it is no less safe."""
    c = runs["tokens"]
    assert c["client_errors"] == 0 and c["demand_x"] >= 3, c
    assert c["provider_429"] == 0, c
    assert c["used"] < 0.95, c
    assert c["used"] < runs["input"]["used"] - 0.03, (c, runs["input"])


def _next_pacific_midnight(at: float) -> float:
    local = dt.datetime.fromtimestamp(at, PACIFIC)
    nxt = dt.datetime.combine(local.date() + dt.timedelta(days=1), dt.time(0), PACIFIC)
    return nxt.timestamp()


def test_requests_per_day_run_out_until_pacific_midnight(tmp_path):
    """A daily quota in America/Los_Angeles: three calls, then the SDK's ClientError 429 in
    Google's format, its RetryInfo and retry-after pointing at the next Pacific midnight; the
    provider saw only the three."""
    import geminiload
    from google.genai import errors

    stack = h.Stack("gemini-rpd", tmp_path / "gemini-rpd", sc.limits_yaml(_rules(day_limit=3)), MOCK)
    try:
        stack.up()
        c = geminiload.client(stack.proxy, attempts=1)
        for i in range(3):
            call = geminiload.generate if i % 2 == 0 else geminiload.stream
            prompt, out = call(c, MODEL, 50, f"call {i}: hi")
            assert prompt > 0 and out > 0
        before = time.time()
        with pytest.raises(errors.ClientError) as e:
            geminiload.generate(c, MODEL, 50, "one too many")
        after = time.time()
        err = e.value
        assert err.code == 429 and err.status == "RESOURCE_EXHAUSTED", err.details
        assert "requests per day (America/Los_Angeles)" in err.message, err.message
        details = {d["@type"]: d for d in err.details["error"]["details"]}
        delay = float(details["type.googleapis.com/google.rpc.RetryInfo"]["retryDelay"].rstrip("s"))
        assert "type.googleapis.com/google.rpc.QuotaFailure" in details, details
        # Until the next 00:00 in Los Angeles (daylight saving included), to the second.
        lo, hi = _next_pacific_midnight(before) - after, _next_pacific_midnight(after) - before
        assert lo - 1 <= delay <= hi + 1, (delay, lo, hi)
        assert abs(int(err.response.headers["retry-after"]) - delay) <= 1, dict(err.response.headers)
        # Not UTC's midnight: the two differ by 7 or 8 hours, so the delay is no UTC day's end.
        utc_end = dt.datetime.combine(dt.datetime.fromtimestamp(before, dt.timezone.utc).date() + dt.timedelta(days=1),
                                      dt.time(0), dt.timezone.utc).timestamp() - before
        assert abs(delay - utc_end) > 3600, (delay, utc_end)
        # The refusal stands: the next call is refused too, by the limiter.
        with pytest.raises(errors.ClientError):
            geminiload.stream(c, MODEL, 50, "still too many")
        recs = [r for r in h.read_jsonl(stack.records_path) if r["provider"] == "gemini"]
        assert [r["status"] for r in recs] == [200, 200, 200], recs
    finally:
        stack.down()


def test_vertex_ai_and_the_json_array_stream(tmp_path):
    """Vertex AI with google-genai (vertexai=True) through Envoy's vertex-ai host, priced as
    Vertex; and streamGenerateContent without alt=sse (one JSON array, as other clients call it)
    on the Gemini API's host, settled like the rest."""
    import geminiload
    from google.genai import errors

    rules = _rules(provider="vertex").replace(f"limit: {int(TPM * sc.MARGIN)}", "limit: 300")
    stack = h.Stack("gemini-vertex", tmp_path / "gemini-vertex", sc.limits_yaml(rules + _rules()), MOCK)
    try:
        stack.up()
        c = geminiload.client(stack.proxy, attempts=1, vertex=True)
        assert geminiload.generate(c, MODEL, 50, "hi")[1] > 0
        assert geminiload.stream(c, MODEL, 50, "hi")[1] > 0
        # 300 input tokens a minute for Vertex: a long prompt (about 400 by the estimate) never fits.
        with pytest.raises(errors.ClientError) as e:
            geminiload.generate(c, MODEL, 50, "a river of Europe " * 80)
        assert e.value.code in (413, 429), e.value.details
        # The JSON array stream, through the proxy, on the Gemini API.
        import urllib.request

        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 50}}
        req = urllib.request.Request(f"{geminiload.GEMINI}/v1beta/models/{MODEL}:streamGenerateContent",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", "x-goog-api-key": "mock-gemini-key"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": stack.proxy}))
        with opener.open(req, timeout=30) as r:
            assert r.status == 200
            chunks = json.loads(r.read())
        assert isinstance(chunks, list) and len(chunks) == 3, chunks
        assert chunks[-1]["usageMetadata"]["candidatesTokenCount"] == 40, chunks[-1]
        recs = h.read_jsonl(stack.records_path)
        assert [(r["provider"], r["status"]) for r in recs] == [("vertex", 200), ("vertex", 200), ("gemini", 200)], recs
        # Envoy flushes its access log every 250 ms.
        h.wait_until(lambda: len(sc.access_log(stack)) >= 4, 10, "four access-log lines")
        log = sc.access_log(stack)
        assert [(sc.meta(e, "provider"), sc.meta(e, "decision")) for e in log] == [
            ("vertex", "allowed"), ("vertex", "allowed"), ("vertex", "too_large"), ("gemini", "allowed")], log
    finally:
        stack.down()


def test_the_mocks_day_ends_at_its_pacific_midnight(tmp_path):
    """The mock's own requests per day, through Envoy, on its quota clock set six seconds before
    Pacific midnight (POST /gemini/clock): its Google-shaped 429 reaches the SDK intact, with a
    RetryInfo until that midnight, and the SDK's retries get through once it has passed, not
    before. The limiter has no daily rule here: this is the provider's refusal."""
    import geminiload
    from google.genai import errors

    stack = h.Stack("gemini-mock-day", tmp_path / "gemini-mock-day", sc.limits_yaml(_rules()), MOCK + ["-gemini-rpd", "2"])
    try:
        stack.up()
        c = geminiload.client(stack.proxy, attempts=1)
        code, body = h.http_post(stack.mock_url + "/gemini/clock", json.dumps({"now": "2026-03-07T23:59:54-08:00"}).encode())
        set_at = time.time()
        assert code == 200 and json.loads(body)["now"].startswith("2026-03-07T23:59:54"), body
        midnight = set_at + 6  # the mock's Pacific midnight, on this machine's clock
        for i in range(2):
            assert geminiload.generate(c, MODEL, 50, f"call {i}")[0] > 0
        with pytest.raises(errors.ClientError) as e:
            geminiload.generate(c, MODEL, 50, "over the day")
        err = e.value
        assert err.code == 429 and err.status == "RESOURCE_EXHAUSTED", err.details
        details = {d["@type"]: d for d in err.details["error"]["details"]}
        assert details["type.googleapis.com/google.rpc.QuotaFailure"]["violations"][0]["quotaId"] == \
            "GenerateRequestsPerDayPerProjectPerModel-FreeTier", details
        assert details["type.googleapis.com/google.rpc.RetryInfo"]["retryDelay"] in ("5s", "6s"), details
        # The SDK's own backoff (HttpRetryOptions) gets through after the mock's midnight.
        retrying = geminiload.client(stack.proxy, attempts=8, max_delay=2)
        assert geminiload.stream(retrying, MODEL, 50, "after midnight")[0] > 0
        done = time.time()
        assert done >= midnight - 0.5, (done, midnight)
        recs = [r for r in h.read_jsonl(stack.records_path) if r["provider"] == "gemini"]
        statuses = [r["status"] for r in recs]
        assert statuses[:3] == [200, 200, 429] and statuses[-1] == 200 and set(statuses[3:-1]) <= {429}, statuses
        # Refused before its midnight, admitted after it.
        assert all(r["t"] < midnight + 0.5 for r in recs if r["status"] == 429), (recs, midnight)
        assert recs[-1]["t"] >= midnight - 0.5, (recs[-1], midnight)
    finally:
        stack.down()
