"""Money budgets end to end: the real Envoy, three ext-authz replicas on one Redis, the official
SDKs in several OS processes, and a mock provider that bills every answer from its own price list
(e2e/mockprovider/ledger.go: the providers' list prices, cited, never the limiter's table).

One stack, four phases:

1. Mixed models, streams and cached prompts under a budget they do not reach (gpt-4o through the
   `openai` SDK, every other call streamed; Claude Sonnet through the `anthropic` SDK, every other
   call on a cached 2,750-token system prefix, written once then read, every other call
   streamed): once every response has settled, what each provider's budget holds as spent equals
   the mock's bill to the micro-dollar, and so does the spend the replicas count.
2. Saturation: three `openai` SDK processes call gpt-4o-mini far above a 0.02 USD budget, every
   other call streamed. The mock's bill never exceeds the budget, the requests admitted before
   the first refusal spent at least 95% of it, the budget holds what the mock billed, and the
   three replicas together count its 80% threshold once.
3. The refusal as the SDKs see it: the `openai` SDK raises RateLimitError with code
   insufficient_quota and the budget's message, the `anthropic` SDK RateLimitError with the
   message, and neither retries (each call reaches the limiter once).
4. A rolling window: two `openai` SDK processes far above 0.05 USD in any 8 s
   (`algorithm: sliding_window`), each request reserving twice what it will cost, so that every
   settlement refunds into the sub-window its request was counted in. In no window of the mock's
   bill is the budget exceeded, every window of 8 s plus a sub-window holds at least
   90% of it, and the replicas settle exactly what the mock billed.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

import clientnet
import harness as h
import scenarios as sc

MINI_BUDGET = 20_000  # micro-dollars: 0.02 USD
MIXED_BUDGET = 5_000_000  # 5 USD
HAIKU_BUDGET = 2_000  # 0.002 USD
TENANT = "127.0.0.1"  # the shipped envoy.yaml names the tenant by the client's address

RULES = """  - name: mixed-budget
    per: [tenant]
    cost: {limit: 5, currency: USD, period: month, timezone: Europe/Paris}
  - name: mini-budget
    match: {model: "gpt-4o-mini*"}
    per: [tenant]
    cost: {limit: 0.02, currency: USD, period: month, timezone: Europe/Paris}
  - name: haiku-budget
    match: {model: "claude-haiku-4-5*"}
    cost: {limit: 0.002, currency: USD, period: day}
  - name: rolling-budget
    match: {model: "gpt-4o-2024*"}
    per: [tenant]
    cost: {limit: 0.05, currency: USD, period: 8s, algorithm: sliding_window}"""
ROLLING_BUDGET = 50_000  # micro-dollars in any 8 s
ROLLING_PERIOD = 8.0
ROLLING_MODEL = "gpt-4o-2024-08-06"


def _ledger(stack: h.Stack) -> dict:
    return json.loads(h.http_get(stack.mock_url + "/ledger")[1])


def _billed(ledger: dict, prefix: str) -> int:
    return sum(a["micros"] for k, a in ledger["keys"].items() if k.startswith(prefix))


def _windows(bills: list[tuple[float, int]]) -> dict:
    """The most the mock billed in any window of the rolling period, and the least in any window of
    the period plus a sub-window that ends after the first such window has passed.

    The mock's clock sees a request up to some milliseconds after the limiter counted it, by an
    amount that varies: the windows checked for the most are 0.3 s shorter than the period, those
    checked for the least 0.3 s longer than the period plus a sub-window (where the limiter lets
    spend leave)."""
    if not bills:
        return {"most_in_a_period": 0, "least_in_a_period_and_a_tenth": 0}
    times = [t for t, _ in bills]
    most = 0
    for i, (t, _) in enumerate(bills):
        most = max(most, sum(m for u, m in bills[:i + 1] if u > t - (ROLLING_PERIOD - 0.3)))
    span = ROLLING_PERIOD * 1.1 + 0.3
    least = None
    t = times[0] + span
    while t <= times[-1]:
        inside = sum(m for u, m in bills if t - span < u <= t)
        least = inside if least is None else min(least, inside)
        t += 0.25
    return {"most_in_a_period": most, "least_in_a_period_and_a_tenth": least or 0,
            "seconds": times[-1] - times[0]}


@pytest.fixture(scope="module")
def cost(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cost")
    stack = h.Stack("cost", workdir / "cost", sc.limits_yaml(RULES, tenant="{source: header, header: x-tenant-id}"),
                    ["-openai-tpm", "0", "-anthropic-itpm", "100000000", "-anthropic-otpm", "100000000",
                     "-latency", "100ms", "-completion-tokens", "16"], replicas=3)
    out: dict = {}
    try:
        stack.up()
        # 1. Mixed models, streams, cached prompts: below the budget.
        mixed = [{"provider": "openai", "model": "gpt-4o", "key": "sk-cost-openai-0", "threads": 3, "max_tokens": 64,
                  "stream_every": 2, "ramp": 1},
                 {"provider": "anthropic", "model": sc.ANTHROPIC_MODEL, "key": "sk-cost-anthropic-1", "threads": 3,
                  "max_tokens": 64, "stream_every": 2, "cache_every": 2, "offset": 5, "ramp": 1}]
        out["mixed_clients"] = sc.client_totals(sc.run_load(stack, "cost-mixed", 10.0, python=mixed))
        out["mixed_settled"] = stack.await_settled()
        ledger = _ledger(stack)
        out["mixed"] = {
            "openai_spent": stack.spent("openai", "gpt-4o", TENANT, "mixed-budget"),
            "openai_billed": _billed(ledger, "sk-cost-openai-"),
            "anthropic_spent": stack.spent("anthropic", sc.ANTHROPIC_MODEL, TENANT, "mixed-budget"),
            "anthropic_billed": _billed(ledger, "sk-cost-anthropic-"),
            "settled_metric": stack.metric("llm_ratelimit_spend_settled_micros_total", 'rule="mixed-budget"'),
            "reserved_metric": stack.metric("llm_ratelimit_spend_reserved_micros_total", 'rule="mixed-budget"'),
            "unpriced": sum(a["unpriced"] for a in ledger["keys"].values()),
            "cache_reads": sum(1 for r in h.read_jsonl(stack.records_path) if r.get("cache_read")),
            "cache_writes": sum(1 for r in h.read_jsonl(stack.records_path) if r.get("cache_write")),
        }

        # 2. Saturation: three processes far above the gpt-4o-mini budget. max_tokens is the
        # mock's completion (16): each reservation is what the request will cost.
        mini = [{"provider": "openai", "model": "gpt-4o-mini", "key": f"sk-cost-mini-{i}", "threads": 4, "max_tokens": 16,
                 "stream_every": 2, "offset": 7 * i, "ramp": 1} for i in range(3)]
        out["mini_clients"] = sc.client_totals(sc.run_load(stack, "cost-mini", 20.0, python=mini))
        out["mini_settled"] = stack.await_settled()
        recs = {r["request_id"]: r for r in h.read_jsonl(stack.records_path) if r.get("request_id")}
        log = [e for e in sc.access_log(stack) if sc.meta(e, "model") == "gpt-4o-mini"]
        refusals = sorted(sc.iso_time(e["time"]) for e in log if sc.meta(e, "decision") == "spent")
        first = refusals[0] if refusals else float("inf")
        before = sum(recs[e["request_id"]].get("micros", 0) for e in log
                     if sc.meta(e, "decision") == "allowed" and sc.iso_time(e["time"]) < first and e["request_id"] in recs)
        ledger = _ledger(stack)
        out["mini"] = {
            "billed": _billed(ledger, "sk-cost-mini-"),
            "spent": stack.spent("openai", "gpt-4o-mini", TENANT, "mini-budget"),
            "refusals": len(refusals),
            "billed_before_first_refusal": before,
            "openai_spent_all": stack.spent("openai", "gpt-4o", TENANT, "mixed-budget"),
            "openai_billed_all": _billed(ledger, "sk-cost-openai-") + _billed(ledger, "sk-cost-mini-"),
            # Counted by the replica whose take crossed 80% of the budget, by no other.
            "threshold_crossings": stack.metric("llm_ratelimit_spend_threshold_crossed_total", 'rule="mini-budget"'),
        }

        # 3. The SDKs meet a spent budget.
        spent0 = stack.metric("llm_ratelimit_decisions_total", 'decision="spent"')
        oa = openai.OpenAI(api_key="sk-cost-sdk", base_url="http://api.openai.com/v1", max_retries=2, timeout=30.0,
                           http_client=openai.DefaultHttpx2Client(transport=clientnet.transport(stack.proxy, None)))
        try:
            oa.chat.completions.create(model="gpt-4o-mini", max_tokens=100, messages=[{"role": "user", "content": "Hello"}])
            out["openai_sdk"] = {"raised": None}
        except openai.RateLimitError as e:
            out["openai_sdk"] = {"raised": type(e).__name__, "code": e.code, "message": e.message}
        spent1 = stack.metric("llm_ratelimit_decisions_total", 'decision="spent"')
        an = anthropic.Anthropic(api_key="sk-cost-sdk", base_url="http://api.anthropic.com", max_retries=2, timeout=30.0,
                                 http_client=anthropic.DefaultHttpxClient(proxy=stack.proxy, trust_env=False, verify=False))
        # Reserves about 0.00193 of the 0.002 budget and costs about 0.0001: the next one cannot fit.
        haiku = {"model": "claude-haiku-4-5", "max_tokens": 380, "messages": [{"role": "user", "content": "Hello"}]}
        an.messages.create(**haiku)
        spent2 = stack.metric("llm_ratelimit_decisions_total", 'decision="spent"')
        try:
            an.messages.create(**haiku)
            out["anthropic_sdk"] = {"raised": None}
        except anthropic.RateLimitError as e:
            out["anthropic_sdk"] = {"raised": type(e).__name__, "message": str(e)}
        spent3 = stack.metric("llm_ratelimit_decisions_total", 'decision="spent"')
        out["sdk_refusals_seen"] = {"openai": spent1 - spent0, "anthropic": spent3 - spent2}

        # 4. A rolling window. max_tokens is twice the mock's completion (16): every settlement
        # gives back about two fifths of its reservation.
        before = stack.await_settled()
        rolling = [{"provider": "openai", "model": ROLLING_MODEL, "key": f"sk-cost-rolling-{i}", "threads": 3, "max_tokens": 32,
                    "stream_every": 0, "offset": 11 * i, "ramp": 1} for i in range(2)]
        out["rolling_clients"] = sc.client_totals(sc.run_load(stack, "cost-rolling", 20.0, python=rolling))
        after = stack.await_settled()
        out["rolling_settled"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        bills = sorted((r["t"], r.get("micros", 0)) for r in h.read_jsonl(stack.records_path)
                       if r.get("key", "").startswith("sk-cost-rolling-") and r["status"] == 200)
        out["rolling"] = {
            "requests": len(bills),
            "billed": _billed(_ledger(stack), "sk-cost-rolling-"),
            "settled_metric": stack.metric("llm_ratelimit_spend_settled_micros_total", 'rule="rolling-budget"'),
            "reserved_metric": stack.metric("llm_ratelimit_spend_reserved_micros_total", 'rule="rolling-budget"'),
            **_windows(bills),
        }
    finally:
        stack.down()
    (h.E2E / "report").mkdir(exist_ok=True)
    (h.E2E / "report" / "cost.json").write_text(json.dumps(out, indent=1))
    return out


def test_mixed_settled_cost_equals_the_bill(cost):
    m = cost["mixed"]
    c = cost["mixed_clients"]
    # Every answer settled from its usage: nothing kept for want of one.
    assert cost["mixed_settled"].get("usage") == cost["mixed_settled"]["answered"], cost["mixed_settled"]
    assert c["ok"] > 20 and c["errors"] == 0 and c["rate_limited"] == 0, c
    assert c["streamed"] > 0 and c["stream_usage"] == c["streamed"], c
    assert m["cache_writes"] >= 1 and m["cache_reads"] >= 1, m
    assert m["unpriced"] == 0, m
    assert m["openai_billed"] > 0 and m["anthropic_billed"] > 0, m
    assert m["openai_spent"] == m["openai_billed"], m
    assert m["anthropic_spent"] == m["anthropic_billed"], m
    assert m["settled_metric"] == m["openai_billed"] + m["anthropic_billed"], m
    # Reserved at the most each could cost: never below what they cost.
    assert m["reserved_metric"] >= m["settled_metric"], m


def test_budget_never_exceeded_and_spent_before_refusal(cost):
    m = cost["mini"]
    c = cost["mini_clients"]
    assert m["refusals"] > 0 and c["rate_limited"] > 0, (m, c)
    assert c["errors"] == 0, c
    assert m["billed"] <= MINI_BUDGET, m
    assert m["spent"] == m["billed"], m
    assert m["billed_before_first_refusal"] >= 0.95 * MINI_BUDGET, m
    assert m["openai_spent_all"] == m["openai_billed_all"], m
    # Its reservations are its costs, so its spend crossed 80% once, in one replica's take.
    assert m["threshold_crossings"] == 1, m


def test_sdks_raise_the_budget_error_without_retrying(cost):
    o, a = cost["openai_sdk"], cost["anthropic_sdk"]
    assert o["raised"] == "RateLimitError" and o["code"] == "insufficient_quota", o
    assert "Budget mini-budget is spent" in o["message"] and "renews at" in o["message"], o
    assert a["raised"] == "RateLimitError", a
    assert "Budget haiku-budget is spent" in a["message"] and "renews at" in a["message"], a
    assert cost["sdk_refusals_seen"] == {"openai": 1, "anthropic": 1}, cost["sdk_refusals_seen"]


def test_rolling_budget_holds_in_every_window(cost):
    r, c = cost["rolling"], cost["rolling_clients"]
    assert c["ok"] > 0 and c["rate_limited"] > 0 and c["errors"] == 0, c
    # Far above the budget for two periods: the window refilled twice, and the windows after the
    # first period and a tenth are checked.
    assert r["seconds"] > 2 * ROLLING_PERIOD, r
    assert 0 < r["most_in_a_period"] <= ROLLING_BUDGET, r
    assert r["least_in_a_period_and_a_tenth"] >= 0.9 * ROLLING_BUDGET, r
    # Reserved at twice the output it used, settled to the bill.
    assert cost["rolling_settled"].get("usage") == cost["rolling_settled"]["answered"], cost["rolling_settled"]
    assert r["settled_metric"] == r["billed"] and r["reserved_metric"] > r["billed"], r
