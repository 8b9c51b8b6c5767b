"""Hostile clients against the response path (settlement), through the real Envoy running the
shipped envoy.yaml, two ext-authz replicas on one Redis, the mock provider (which compresses its
replies when the client accepts it, like the providers) and the official SDKs.

Two stacks run side by side on the same limits: "on" with the shipped settlement defaults, and
"off", the control, with every defence of this file switched off in the limits file
(settlement: decode [], keep_on_client_error 0, usage_factor 0, max_usage_tokens 1e12): the
behaviour before them. Each attack is asserted on both, so each test can fail.

  - a refundable reservation parked with requests the provider refuses at once (4xx): the victim
    is no longer starved;
  - default SDK traffic (Accept-Encoding: gzip, deflate) is compressed: it settles exactly like
    uncompressed traffic, refunds and overage from the mock's ledger;
  - an upstream reporting a usage of 1e12: clamped and counted, the bucket stays usable.

The tests run in file order on the same two stacks: the 4xx attack first (on a full Anthropic
bucket), the usage of 1e12 last (it locks the control's OpenAI bucket for good)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import urllib.request

import anthropic
import openai
import pytest

import harness as h
import report as rpt

LIMITS = """# written by e2e/test_hostile_settlement.py: internal/config/example.yaml's provider rules
tenant: {{source: none}}
pricing: {{default_output_tokens: 4096}}
failure: {{mode: deny}}
rules:
  - name: openai-per-model
    match: {{provider: openai}}
    per: [model]
    tokens: {{limit: 30000, period: minute}}
  - name: anthropic
    match: {{provider: anthropic}}
    tokens: {{limit: 40000, period: minute}}
    refund: true
{settlement}
"""
OFF = "settlement: {decode: [], keep_on_client_error: 0, usage_factor: 0, max_usage_tokens: 1000000000000}"

ATTACK_MAX_TOKENS = 39800  # with its prompt, just under the Anthropic bucket's 40000
VICTIM_MAX_TOKENS = 300    # more than a parked bucket has left; a served victim keeps the attack out until it refills (0.5 s)
VICTIM_CALLS = 10


def _settled(stack: h.Stack) -> float:
    return stack.metric("llm_ratelimit_reconciled_responses_total")


def _await_settled(stack: h.Stack, n: float) -> None:
    h.wait_until(lambda: _settled(stack) >= n, 20, f"{stack.name}: {n} responses settled")


def _clients(stack: h.Stack, key: str, accept: str | None = None):
    hdrs = {"Accept-Encoding": accept} if accept else None
    oa = openai.OpenAI(api_key=key, base_url="http://api.openai.com/v1", max_retries=0, default_headers=hdrs,
                       http_client=openai.DefaultHttpx2Client(proxy=stack.proxy, trust_env=False))
    an = anthropic.Anthropic(api_key=key, base_url="http://api.anthropic.com", max_retries=0, default_headers=hdrs,
                             http_client=anthropic.DefaultHttpxClient(proxy=stack.proxy, trust_env=False))
    return oa, an


@pytest.fixture(scope="module")
def stacks():
    d = rpt.REPORT_DIR / "run"
    d.mkdir(parents=True, exist_ok=True)
    made = {}
    for name, settlement in (("on", ""), ("off", OFF)):
        made[name] = h.Stack(f"hostile-settlement-{name}", d / f"hostile-settlement-{name}",
                             LIMITS.format(settlement=settlement),
                             ["-latency", "100ms", "-error-latency", "300ms", "-openai-tpm", "0", "-anthropic-tpm", "0"])
    try:
        with cf.ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda s: s.up(), made.values()))
        yield made
    finally:
        for s in made.values():
            s.down()


def _both(stacks, fn):
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        futs = {name: pool.submit(fn, s) for name, s in stacks.items()}
        return {name: f.result(timeout=120) for name, f in futs.items()}


# ---------------------------------------------------------------------------------------------
# Row 10: requests the provider refuses at once, each holding a huge reservation while in flight


def _park(stack: h.Stack) -> dict:
    """Four attacker threads loop on a body the provider refuses (content 42: a 400) with
    max_tokens 39800; after a second, the victim makes 10 calls one after the other."""
    stop = threading.Event()
    _, an_attacker = _clients(stack, "sk-attacker")
    _, an_victim = _clients(stack, "sk-victim")

    def attack():
        while not stop.is_set():
            try:
                an_attacker.messages.create(model="claude-sonnet-4-6", max_tokens=ATTACK_MAX_TOKENS,
                                            messages=[{"role": "user", "content": 42}],
                                            timeout=30)  # else the SDK refuses a max_tokens this large
            except anthropic.APIError:
                pass

    threads = [threading.Thread(target=attack, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    # The victim starts once a first refused request has been settled.
    h.wait_until(lambda: stack.metric("llm_ratelimit_reconciled_responses_total", 'result="upstream_error"') >= 1,
                 10, f"{stack.name}: a first refused request settled")
    outcomes = []
    try:
        for _ in range(VICTIM_CALLS):
            try:
                an_victim.messages.create(model="claude-sonnet-4-6", max_tokens=VICTIM_MAX_TOKENS,
                                          messages=[{"role": "user", "content": "Hello"}])
                outcomes.append("ok")
            except anthropic.RateLimitError:
                outcomes.append("429")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    records = h.read_jsonl(stack.records_path)
    return {"victim": outcomes,
            "victim_admitted_by_provider": sum(1 for r in records if r.get("key") == "sk-victim" and r["status"] == 200),
            "attacker_at_provider": sum(1 for r in records if r.get("key") == "sk-attacker"),
            "attacker_admitted_by_provider": sum(1 for r in records if r.get("key") == "sk-attacker" and r["status"] == 200)}


def test_a_4xx_keeps_part_of_its_reservation_so_nothing_is_parked_for_free(stacks):
    res = _both(stacks, _park)
    on, off = res["on"], res["off"]
    rpt.write_json("hostile-settlement-4xx", res)
    # The control: refunded in full, the attackers keep the bucket parked and the victim starves.
    assert off["victim"].count("429") >= VICTIM_CALLS // 2, off
    # With the defence, each refused request keeps a quarter: after the first, the attackers'
    # 39800 no longer fits and they hold nothing; the victim is served.
    assert on["victim"].count("ok") == VICTIM_CALLS and on["victim_admitted_by_provider"] == VICTIM_CALLS, on
    assert on["attacker_at_provider"] < off["attacker_at_provider"], res
    # The provider admitted none of the attack: its cost to the budget was the limiter's alone.
    assert on["attacker_admitted_by_provider"] == 0 == off["attacker_admitted_by_provider"], res


# ---------------------------------------------------------------------------------------------
# Row 6: compressed replies settle


def _raw(stack: h.Stack, url: str, body: dict, key: str, accept: str) -> bytes:
    """One call through Envoy as an HTTP proxy client, the reply read as it comes (still encoded):
    the SDKs' HTTP client decodes gzip and deflate only."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": stack.proxy}))
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "content-type": "application/json", "x-api-key": key, "authorization": f"Bearer {key}",
        "anthropic-version": "2023-06-01", "accept-encoding": accept})
    with opener.open(req, timeout=30) as r:
        assert r.headers.get("content-encoding") == accept, r.headers
        return r.read()


def _traffic(stack: h.Stack) -> dict:
    """Anthropic (refund: true) calls JSON and streamed, with the SDKs' default Accept-Encoding
    (gzip, deflate), with identity, and with br and zstd; OpenAI calls whose upstream reports 150
    tokens where about 60 were reserved (overage)."""
    before = {d: stack.metric("llm_ratelimit_reconciled_tokens_total", f'direction="{d}"') for d in ("refund", "overage")}
    undecodable = stack.metric("llm_ratelimit_reconcile_errors_total", 'reason="decode_unsupported"')
    decode_errors = stack.metric("llm_ratelimit_reconcile_errors_total", "decode_")
    settled = _settled(stack)
    n = 0
    story = [{"role": "user", "content": "Tell me a story"}]
    for accept in (None, "identity"):
        oa, an = _clients(stack, f"sk-traffic-{accept or 'default'}", accept)
        an.messages.create(model="claude-sonnet-4-6", max_tokens=200, messages=story)
        with an.messages.stream(model="claude-sonnet-4-6", max_tokens=200, messages=story) as st:
            st.get_final_message()
        oa.chat.completions.create(model="gpt-4o-mini", max_tokens=50, messages=[{"role": "user", "content": "Hi"}],
                                   extra_headers={"x-mock-usage-tokens": "150"})
        n += 3
    for accept in ("br", "zstd"):
        key = f"sk-traffic-{accept}"
        for stream in (False, True):
            _raw(stack, "http://api.anthropic.com/v1/messages",
                 {"model": "claude-sonnet-4-6", "max_tokens": 200, "messages": story, "stream": stream}, key, accept)
        _raw(stack, "http://api.openai.com/v1/chat/completions",
             {"model": "gpt-4o-mini", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]}, key, accept)
        n += 3
    # The usage header rides on the SDK calls only; the raw OpenAI calls report what they used.
    _await_settled(stack, settled + n)
    records = [r for r in h.read_jsonl(stack.records_path) if r.get("key", "").startswith("sk-traffic-")]
    cost: dict = {}

    def logged() -> bool:
        cost.update({r["request_id"]: int(float(r["cost"])) for r in h.read_jsonl(stack.access_log_path)
                     if r.get("request_id") and r.get("cost") not in (None, "", "-")})
        return all(r["request_id"] in cost for r in records)
    h.wait_until(logged, 10, f"{stack.name}: every call in Envoy's access log")
    # What the provider's ledger says the limiter should give back (refund: true) and charge.
    refund = sum(cost[r["request_id"]] - r["usage"] for r in records if r["provider"] == "anthropic")
    overage = sum(max(r["usage"] - cost[r["request_id"]], 0) for r in records if r["provider"] == "openai")
    return {"calls": n, "provider_answers": sum(1 for r in records if r["status"] == 200),
            "ledger_refund": refund, "ledger_overage": overage,
            "refund": stack.metric("llm_ratelimit_reconciled_tokens_total", 'direction="refund"') - before["refund"],
            "overage": stack.metric("llm_ratelimit_reconciled_tokens_total", 'direction="overage"') - before["overage"],
            "undecodable": stack.metric("llm_ratelimit_reconcile_errors_total", 'reason="decode_unsupported"') - undecodable,
            "decode_errors": stack.metric("llm_ratelimit_reconcile_errors_total", "decode_") - decode_errors}


def test_compressed_replies_settle_like_uncompressed_ones(stacks):
    res = _both(stacks, _traffic)
    on, off = res["on"], res["off"]
    rpt.write_json("hostile-settlement-compressed", res)
    assert on["provider_answers"] == on["calls"] == 12, on
    assert on["ledger_refund"] > 0 and on["ledger_overage"] > 0, on
    # Every reply settled from its usage, compressed (the SDKs' gzip, br, zstd) or not
    # (identity): the refunds and the overage are the ledger's to the token.
    assert on["refund"] == on["ledger_refund"] and on["overage"] == on["ledger_overage"], on
    assert on["decode_errors"] == 0, on
    # The control decodes nothing: the 9 compressed replies keep their reservations (their
    # refunds and overage lost), only the 3 identity ones settle.
    assert off["undecodable"] == 9, off
    assert off["refund"] < on["refund"] / 2 and off["overage"] < on["overage"], off


# ---------------------------------------------------------------------------------------------
# Row 15: an upstream reporting a usage of 1e12


def _huge(stack: h.Stack) -> dict:
    # identity: the control decodes no compressed reply, and this test is about the usage.
    oa, _ = _clients(stack, "sk-huge", "identity")
    before = _settled(stack)
    oa.chat.completions.create(model="gpt-4o", max_tokens=20, messages=[{"role": "user", "content": "Hi"}],
                               extra_headers={"x-mock-usage-tokens": str(10**12)})
    _await_settled(stack, before + 1)
    # The next call on the same bucket.
    try:
        oa.chat.completions.create(model="gpt-4o", max_tokens=20, messages=[{"role": "user", "content": "Hi"}])
        nxt = "ok"
    except openai.RateLimitError as e:
        nxt = f"429 retry-after {e.response.headers.get('retry-after')}"
    records = [r for r in h.read_jsonl(stack.records_path) if r.get("key") == "sk-huge"]
    return {"next": nxt, "reported": records[0]["usage"], "provider_cost": records[0]["cost"],
            "clamped": stack.metric("llm_ratelimit_usage_clamped_total"),
            "overage": stack.metric("llm_ratelimit_reconciled_tokens_total", 'direction="overage"')}


def test_a_usage_of_1e12_is_clamped_and_counted(stacks):
    before = {name: s.metric("llm_ratelimit_reconciled_tokens_total", 'direction="overage"') for name, s in stacks.items()}
    res = _both(stacks, _huge)
    on, off = res["on"], res["off"]
    rpt.write_json("hostile-settlement-usage", res)
    assert on["reported"] == off["reported"] == 10**12, res
    # Clamped at 8 x the reservation (a few hundred tokens): counted, charged, and the bucket
    # still admits the next call.
    assert on["clamped"] == 1 and on["next"] == "ok", on
    assert 0 < on["overage"] - before["on"] <= 8 * 200, (on, before)
    # The control applies it raw: the bucket is locked (a wait of decades), and the overage metric
    # counts 1e12.
    assert off["clamped"] == 0 and off["next"].startswith("429"), off
    assert off["overage"] - before["off"] > 0.9e12, (off, before)
