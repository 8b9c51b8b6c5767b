"""Amazon Bedrock through the limiter: boto3's bedrock-runtime client, Converse and
InvokeModelWithResponseStream, a Claude 4-era model.

The mock provider runs the Bedrock runtime's own accounting (-bedrock-tpm,
e2e/mockprovider/bedrock.go): one tokens-per-minute quota per model id, input plus maxTokens
reserved at the start, adjusted at the end to input plus 5x the output (the burndown of Claude
Sonnet 4), ThrottlingException 429s. Three boto3 processes ask several times what it allows. The
limiter's rule is the quota (2% below it); its built-in Bedrock profile weighs the output 5x, and
the control run overrides that weight to 1 in the limits file: the provider's own count says which
one keeps under its quota.

Routing: the clients name the real endpoint (endpoint_url
http://bedrock-runtime.us-east-1.amazonaws.com) through Envoy as their HTTP proxy, so SigV4 signs
that host; Envoy routes the bedrock virtual host on it and the limiter recognises Bedrock from the
same :authority.
"""

from __future__ import annotations


import pytest

import harness as h
import report as rpt
import scenarios as sc

TPM = 20_000
MODEL = "us.anthropic.claude-sonnet-4-20250514-v1:0"
DURATION = 30.0
MOCK = ["-bedrock-tpm", str(TPM), "-latency", "200ms", "-completion-tokens", "60"]


def _rules(weight: int | None) -> str:
    rules = f"""  - name: bedrock-claude
    match: {{provider: bedrock}}
    per: [model]
    tokens: {{limit: {int(TPM * sc.MARGIN)}, period: minute}}
"""
    if weight is not None:
        rules += f"accounting:\n  - {{provider: bedrock, output_weight: {weight}}}\n"
    return rules


def _run(workdir, name: str, weight: int | None) -> dict:
    stack = h.Stack(name, workdir / name, sc.limits_yaml(_rules(weight)), MOCK)
    try:
        stack.up()
        summaries = sc.sdk_clients(stack, "bedrockload.py", 3, DURATION,
                                   ["--model", MODEL, "--threads", "4", "--max-tokens", "200"])
        recs = [r for r in h.read_jsonl(stack.records_path) if r["provider"] == "bedrock"]
        log = sc.access_log(stack)
    finally:
        stack.down()
    begin = min(s["started"] for s in summaries)
    end = begin + DURATION
    ok = [r for r in recs if r["status"] == 200 and r["t"] <= end]
    counted = sum(r["cost"] for r in ok)  # input + 5 x output, the mock's own count
    span = max(r["t"] for r in ok) - min(r["t"] for r in ok) if len(ok) > 1 else 0.0
    allowance = rpt.allowance("token_bucket", TPM, sc.PERIOD, span) if span else 0.0
    return {
        "provider_429": sum(1 for r in recs if r["status"] == 429),
        "ok": len(ok),
        "by_api": {api: sum(1 for r in ok if r["api"] == api) for api in ("converse", "invoke_model_stream")},
        **sc.sdk_totals(summaries),
        "limiter_denied": sum(1 for e in log if sc.meta(e, "decision") == "denied"),
        "providers_seen": sorted({sc.meta(e, "provider") for e in log if sc.meta(e, "provider")}),
        "counted_tokens": counted,
        "span_s": round(span, 3),
        "allowance": round(allowance),
        "used": round(counted / allowance, 4) if allowance else 0.0,
        # What the clients asked for: every call at the price the limiter reserves for it.
        "demand_x": round(sum(s["calls"] for s in summaries) * (60 + 5 * 200) / max(allowance, 1), 2),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bedrock")
    out = {"weighted": _run(workdir, "bedrock-weighted", None), "unweighted": _run(workdir, "bedrock-unweighted", 1)}
    rpt.write_json("bedrock", out)
    return out


def test_the_burndown_profile_keeps_bedrock_under_its_quota(runs):
    d = runs["weighted"]
    assert d["client_errors"] == 0, d
    assert d["providers_seen"] == ["bedrock"], d
    assert d["by_api"]["converse"] > 0 and d["by_api"]["invoke_model_stream"] > 0, d
    # Demand far above the quota: the limiter refused, the provider never did.
    assert d["demand_x"] >= 3, d
    assert d["limiter_denied"] > 0, d
    assert d["provider_429"] == 0, d


def test_without_the_output_weight_bedrock_throttles(runs):
    c = runs["unweighted"]
    # The same limit counting each output token once admits what Bedrock counts five times.
    assert c["provider_429"] > 0, c


def test_the_limiters_429_is_a_throttling_exception(tmp_path):
    """With botocore's retries off, the limiter's own 429 reaches the client as Bedrock's
    ThrottlingException; the provider never sees the refused call."""
    import bedrockload
    from botocore.exceptions import ClientError

    stack = h.Stack("bedrock-denial", tmp_path / "bedrock-denial", sc.limits_yaml(_rules(None).replace(
        f"limit: {int(TPM * sc.MARGIN)}", "limit: 1200")), MOCK)
    try:
        stack.up()
        c = bedrockload.client(stack.proxy, attempts=1)
        assert bedrockload.converse(c, MODEL, 200, "hi") > 0  # its prompt + 5 x 200 of 1200; settled, 5 x 60 of it stay
        with pytest.raises(ClientError) as e:
            bedrockload.converse(c, MODEL, 200, "hi")
        err = e.value.response
        assert err["Error"]["Code"] == "ThrottlingException", err
        assert err["ResponseMetadata"]["HTTPStatusCode"] == 429, err
        assert "Rate limit reached for bedrock-claude" in err["Error"]["Message"], err
        # botocore classifies it as throttling, so its retry modes back off on it.
        from botocore.retries.standard import ThrottledRetryableChecker
        assert "ThrottlingException" in ThrottledRetryableChecker._THROTTLED_ERROR_CODES
        recs = [r for r in h.read_jsonl(stack.records_path) if r["provider"] == "bedrock"]
        assert len(recs) == 1 and recs[0]["status"] == 200, recs
    finally:
        stack.down()
