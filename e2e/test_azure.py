"""Azure OpenAI's sub-window RPM and its context-size reservation, through the real Envoy.

Azure enforces a deployment's RPM over windows of 1 or 10 seconds, not the minute: "rate
limiting will occur for a 600-RPM deployment if more than 10 requests are received during each
1-second period" (learn.microsoft.com/azure/ai-foundry/openai/how-to/quota). The mock provider
runs that accounting (-azure-rpm 600 -azure-rpm-window 1s, e2e/mockprovider/azure.go). Three
processes of the official OpenAI Python SDK's AzureOpenAI client (azure_endpoint
http://your-resource-name.openai.azure.com, the resource of the shipped envoy.yaml, with Envoy as
their HTTP proxy, as for OpenAI) fire all their threads at once at every second of the clock:
bursts at over three times the 10 a second allowed, each call retried by the SDK as it does.

- The limiter's rule names both of Azure's windows, 600 a minute and 10 a second (a sliding window:
  at most 10 in any rolling second, so in every second of Azure's, whatever their phase): the
  provider never answers 429, and what it allows is used.
- The control names only the minute's 600: the limiter lets each burst through and Azure refuses
  most of it.
- A request without max_tokens reserves the model's context size on both sides (the limiter's
  Azure profile and the mock's count): they agree on its cost, and the limiter refuses the call
  that Azure's TPM would refuse.
"""

from __future__ import annotations

import math
import time

import openai
import pytest

import harness as h
import loadgen
import report as rpt
import scenarios as sc

RPM, PER_SECOND = 600, 10
DEPLOYMENT = "gpt-4o"  # the mock's deployments are named after their models
DURATION = 20.0
PROCESSES, THREADS = 3, 24
MOCK = ["-azure-rpm", str(RPM), "-azure-rpm-window", "1s", "-azure-tpm", "5000000", "-latency", "100ms",
        "-completion-tokens", "8"]


def _rule(windows: str) -> str:
    return f"""  - name: azure-gpt-4o
    match: {{provider: azure}}
    per: [model]
    requests:
{windows}"""


MINUTE = "      - {limit: %d, period: minute}" % RPM
SECOND = "      - {limit: %d, period: second, algorithm: sliding_window}" % PER_SECOND


def _burst_run(workdir, name: str, rules: str) -> dict:
    stack = h.Stack(name, workdir / name, sc.limits_yaml(rules), MOCK)
    try:
        stack.up()
        python = [{"provider": "azure", "model": DEPLOYMENT, "key": f"azure-key-{i}", "threads": THREADS,
                   "max_tokens": 16, "stream_every": 3, "offset": 7 * i, "burst_every": 1} for i in range(PROCESSES)]
        summaries = sc.run_load(stack, name, DURATION, python=python)
        recs = [r for r in h.read_jsonl(stack.records_path) if r["provider"] == "azure"]

        def azure_log() -> list[dict]:
            return [e for e in sc.access_log(stack) if sc.meta(e, "provider") == "azure"]

        # Every call has ended; Envoy's access log has them all once it holds one allowed entry
        # per request the mock answered (but those Envoy let through unchecked: failed open).
        failed_open = sum(1 for r in recs if r.get("failure_mode_allowed"))
        h.wait_until(lambda: sum(1 for e in azure_log() if sc.meta(e, "decision") == "allowed") == len(recs) - failed_open,
                     10, "Envoy's access log", stack.procs["envoy"])
        log = azure_log()
    finally:
        stack.down()
    start = min(s["started"] for s in summaries)
    end = start + DURATION
    ok = sorted(r["t"] for r in recs if r["status"] == 200)
    # Azure's windows are the clock's seconds: count the admissions of the whole seconds between
    # the first admission and the clients' deadline (the SDKs' last retries after it are no demand).
    first, last = math.ceil(ok[0]), math.floor(end)
    per_second: dict[int, int] = {}
    for t in ok:
        if first <= t < last:
            per_second[int(t)] = per_second.get(int(t), 0) + 1
    seconds = last - first
    admitted = sum(per_second.values())
    client = sc.client_totals(summaries)
    return {
        "provider_429": sum(1 for r in recs if r["status"] == 429),
        "provider_429_requests": sum(1 for r in recs if r["status"] == 429 and r.get("which") == "requests"),
        "provider_ok": len(ok),
        # Let through by Envoy when no ext-authz replica answered: the first suspect of a 429.
        "failed_open": failed_open,
        "limiter_allowed": sum(1 for e in log if sc.meta(e, "decision") == "allowed"),
        "limiter_denied": sum(1 for e in log if sc.meta(e, "decision") == "denied"),
        # The disagreement: calls the limiter let through and the provider refused.
        "allowed_then_provider_429": sum(1 for e in log if sc.meta(e, "decision") == "allowed" and int(e["status"]) == 429),
        "attempts": len(log),
        # First attempts only (the SDKs' retries not counted), against the 10 a second allowed.
        "demand_over_allowed": round(client["calls"] / DURATION / (RPM / 60), 2),
        "seconds": seconds,
        "admitted_in_seconds": admitted,
        # The share of the per-minute allowance (600 a minute: 10 a second) used.
        "allowance_used": round(admitted / (seconds * RPM / 60), 4),
        "max_in_one_second": max(per_second.values(), default=0),
        "client": client,
    }


def test_both_windows_keep_azure_sub_window_rpm(tmp_path):
    d = _burst_run(tmp_path, "azure-both-windows", _rule(f"{MINUTE}\n{SECOND}"))
    rpt.write_json("azure-both-windows", d)
    assert d["client"]["errors"] == 0, d["client"]
    assert d["demand_over_allowed"] >= 3, d
    assert d["limiter_denied"] > 0, d  # the bursts were over the limit: the limiter refused them
    # d["failed_open"] counts the checks no replica answered within Envoy's timeout, let through
    # unpriced (failure_mode_allow): where a 429 here comes from a machine too busy for the run.
    assert d["provider_429"] == 0, d
    # 10 a second in every whole second of the run but the first ones: the rolling second keeps
    # each admission up to 100 ms beyond a second (sub-windows of 100 ms), which costs that much.
    assert d["allowance_used"] >= 0.85, d


def test_control_the_minute_alone_meets_azure_429s(tmp_path):
    d = _burst_run(tmp_path, "azure-minute-only", _rule(MINUTE))
    rpt.write_json("azure-minute-only", d)
    # The minute's 600 does not see the seconds: the limiter lets each burst through and Azure
    # refuses what is over 10 in its second (the refused attempts count against the minute too,
    # so it binds late in the run).
    assert d["provider_429_requests"] > 0, d
    assert d["allowed_then_provider_429"] == d["provider_429"], d


def test_context_size_reserved_without_max_tokens(tmp_path):
    """No max_tokens: both the limiter (Azure's profile) and the mock reserve the prompt plus
    gpt-4o's context size (128,000). With both at 300,000 tokens a minute, two such calls fit and
    the third does not: the limiter refuses it (the mock never sees it), and the mock refuses the
    same request sent to it directly. The mock counts per minute of the clock, so the test starts
    where no minute ends within it."""
    tpm = 300_000
    rules = f"""  - name: azure-tpm
    match: {{provider: azure}}
    per: [model]
    tokens: {{limit: {tpm}, period: minute}}"""
    stack = h.Stack("azure-context", tmp_path / "azure-context", sc.limits_yaml(rules),
                    ["-azure-tpm", str(tpm), "-latency", "10ms"])
    messages = [{"role": "user", "content": "Summarise the quarterly report in one line."}]
    try:
        stack.up()
        client = openai.AzureOpenAI(api_key="azure-key-context", azure_endpoint=loadgen.AZURE_ENDPOINT,
                                    api_version=loadgen.AZURE_API_VERSION, max_retries=0, timeout=20,
                                    http_client=openai.DefaultHttpx2Client(proxy=stack.proxy, trust_env=False))
        if time.time() % 60 > 45:  # the mock's minute would end within the test: start in the next
            time.sleep(61 - time.time() % 60)
        with client:
            # The limiter's own x-ratelimit-* headers replace the provider's on the way back: what
            # its bucket holds after each debit.
            remaining = [int(client.chat.completions.with_raw_response.create(model=DEPLOYMENT, messages=messages)
                             .headers["x-ratelimit-remaining-tokens"]) for _ in range(2)]
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model=DEPLOYMENT, messages=messages)
        h.wait_until(lambda: len(h.read_jsonl(stack.records_path)) == 2, 10, "the mock's records")
        recs = h.read_jsonl(stack.records_path)
        direct, body = h.http_post(f"{stack.mock_url}/openai/deployments/{DEPLOYMENT}/chat/completions"
                                   f"?api-version={loadgen.AZURE_API_VERSION}",
                                   f'{{"model": "{DEPLOYMENT}", "messages": [{{"role": "user", "content": '
                                   f'"{messages[0]["content"]}"}}]}}'.encode())
        h.wait_until(lambda: len([e for e in sc.access_log(stack) if sc.meta(e, "provider") == "azure"]) == 3, 10,
                     "Envoy's access log")
        log = [e for e in sc.access_log(stack) if sc.meta(e, "provider") == "azure"]
    finally:
        stack.down()
    out = {"mock": [{k: r[k] for k in ("status", "prompt", "cost")} for r in recs],
           "limiter_log": [{k: sc.meta(e, k) for k in ("decision", "prompt_tokens", "output_tokens", "cost")} for e in log],
           "limiter_remaining_tokens": remaining, "limiter_refusal": refused.value.message,
           "direct_to_mock": [direct, body.decode(errors="replace")]}
    rpt.write_json("azure-context", out)
    prompt = recs[0]["prompt"]
    reserved = prompt + 128_000
    # The mock (Azure's count): the prompt plus gpt-4o's context size, twice.
    assert [r["status"] for r in recs] == [200, 200] and [r["cost"] for r in recs] == [reserved] * 2, out
    # The limiter priced the same prompt and debited the same reservation: its bucket lost it
    # twice (a token bucket refills 5,000 a second: at most a second of refill between the two),
    # and its refusal of the third names it.
    assert all(int(sc.meta(e, "prompt_tokens")) == prompt for e in log), out
    # The access log reports what admission counted: the context size, not the default output.
    assert [int(float(sc.meta(e, "cost"))) for e in log] == [reserved] * 3, out
    assert remaining[0] == tpm - reserved and 0 <= remaining[1] - (tpm - 2 * reserved) <= tpm // 60, out
    assert refused.value.status_code == 429 and "azure-tpm" in refused.value.message, out
    assert f"Requested {reserved}" in refused.value.message, out
    # Azure's own count refuses the third as well.
    assert direct == 429 and b"token rate limit" in body, out
