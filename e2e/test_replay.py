"""Recording a run through the real Envoy and replaying it offline.

Two ext-authz replicas on one Redis, each with its own -decision-log, behind the shipped
envoy.yaml and the mock provider (billing actual usage, so that the response path settles).
Three tenants (three client addresses: the shipped envoy.yaml names the tenant by the peer's
address) send requests through Envoy one after the other, in a fixed interleaving; then
`ext-authz replay` runs both replicas' logs, merged:

- against the same limits, it must find what Envoy's clients saw: the same outcome for at
  least 95% of the requests, the totals per tenant within 2% (the live run's clock is Redis's,
  the replay's the recorded times), and no key or prompt in the logs;
- against halved limits, its refusals per tenant must be within 10% of those of the same
  traffic sent live through a second stack with the halved limits.

The client pauses a few milliseconds after each response. The response path settles in
observability mode, as the response passes (docs/decisions.md): a next request sent at once
races its predecessor's refund in the live run itself, and whichever reached Redis first
decided; the log orders them by when the store answered each, which such a race can invert.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import time
from collections import Counter
from urllib.parse import urlsplit

import pytest

import harness as h
import report
import scenarios as sc

RUN_DIR = report.REPORT_DIR / "run"
KEY = "sk-replay-secret-key"
PROMPT = "a replayed prompt that must never be written"
PAUSE = 0.005
LIMIT = 1200
# Three tenants at three rates: the first sends three requests for each of the third's.
TRAFFIC = ["127.0.0.21", "127.0.0.22", "127.0.0.21", "127.0.0.23", "127.0.0.21", "127.0.0.22"] * 15
BODY = json.dumps({"model": sc.OPENAI_MODEL, "messages": [{"role": "user", "content": PROMPT}],
                   "max_tokens": 400}).encode()


def _rules(limit: int) -> str:
    return f"""  - name: per-tenant
    per: [tenant]
    tokens: {{limit: {limit}, period: minute}}
    refund: true"""


def _stack(name: str, limit: int) -> h.Stack:
    workdir = RUN_DIR / name
    s = h.Stack(name, workdir, sc.limits_yaml(_rules(limit), tenant="{source: header, header: x-tenant-id}"),
                ["-mode", "token_bucket", "-openai-tpm", "100000000", "-latency", "20ms",
                 "-completion-tokens", "30", "-charge", "actual"], replicas=2,
                replica_args=["-decision-log", str(workdir / "decisions-{i}.log")])
    for i in range(2):
        (workdir / f"decisions-{i}.log").unlink(missing_ok=True)
    return s


@pytest.fixture(scope="module")
def recorded():
    """The traffic sent live at LIMIT, its statuses, and the stack's logs once drained."""
    s = _stack("replay", LIMIT)
    try:
        s.up()
        statuses = _send(s)
        # SIGTERM drains each replica and writes out its log.
        for i in range(2):
            s.replica(i).stop(grace=10)
        logs = [s.dir / f"decisions-{i}.log" for i in range(2)]
        yield s, statuses, [p for p in logs if p.exists()]
    finally:
        s.down()


def _post(stack: h.Stack, tenant: str) -> int:
    """One request through Envoy as a proxy (an absolute URL), from the tenant's address."""
    proxy = urlsplit(stack.proxy)
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=30, source_address=(tenant, 0))
    try:
        conn.request("POST", "http://api.openai.com/v1/chat/completions", body=BODY,
                     headers={"content-type": "application/json", "authorization": "Bearer " + KEY})
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def _send(stack: h.Stack) -> list[int]:
    statuses = []
    for tenant in TRAFFIC:
        statuses.append(_post(stack, tenant))
        time.sleep(PAUSE)
    assert len(statuses) == len(TRAFFIC) and set(statuses) <= {200, 429}, Counter(statuses)
    return statuses


def _denied(statuses: list[int]) -> Counter:
    return Counter(t for t, st in zip(TRAFFIC, statuses) if st == 429)


def _replay(stack: h.Stack, limits: str, logs) -> dict:
    path = stack.dir / limits
    out = subprocess.run([str(h.BIN / "ext-authz"), "replay", "-config", str(path), "-json", *map(str, logs)],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_replay_reproduces_recorded_run(recorded):
    stack, statuses, logs = recorded
    n = len(TRAFFIC)
    allowed, denied = statuses.count(200), statuses.count(429)
    assert allowed > 0 and denied > 0, f"{allowed} allowed, {denied} denied: the run must do both"
    text = "".join(p.read_text() for p in logs)
    assert text.count('"ev":"decision"') == n, text[:2000]
    assert text.count('"ev":"settlement"') == allowed, text[:2000]
    assert KEY not in text and "replay-secret" not in text and PROMPT not in text
    rep = _replay(stack, "limits.yaml", logs)
    assert rep["decisions"] == n
    got_admitted = sum(r["allowed"] + r["held"] for r in rep["rows"])
    # Every request admitted live has its settlement in the log, so the recorded settlements the
    # replay applied are the requests both admitted; the rest of either side's admissions differ.
    both = rep["settled"]
    differ = (allowed - both) + (got_admitted - both)
    print(f"live: {allowed} allowed, {denied} denied; replay: {got_admitted} admitted, "
          f"{both} settlements applied, {rep['modelled']} modelled; {differ} of {n} outcomes differ")
    assert differ <= 0.05 * n, (differ, n)
    live = _denied(statuses)
    for tenant in sorted(set(TRAFFIC)):
        got = sum(r["denied"] for r in rep["rows"] if r["tenant"] == tenant)
        print(f"  {tenant}: live {live[tenant]} denied, replay {got}")
        assert abs(got - live[tenant]) <= max(1, 0.02 * TRAFFIC.count(tenant)), (tenant, got, live[tenant])


def test_replay_with_halved_limits_predicts_the_live_refusals(recorded):
    stack, statuses, logs = recorded
    (stack.dir / "limits-half.yaml").write_text(
        sc.limits_yaml(_rules(LIMIT // 2), tenant="{source: header, header: x-tenant-id}"))
    rep = _replay(stack, "limits-half.yaml", logs)
    half = _stack("replay-half", LIMIT // 2)
    try:
        half.up()
        live = _denied(_send(half))
    finally:
        half.down()
    before = _denied(statuses)
    report.write_json("replay-halved", {"traffic": len(TRAFFIC), "limit": LIMIT, "halved": LIMIT // 2,
                                   "recorded_denied": dict(before), "live_halved_denied": dict(live),
                                   "replay_halved_denied": {t: sum(r["denied"] for r in rep["rows"] if r["tenant"] == t)
                                                            for t in sorted(set(TRAFFIC))},
                                   "replay_modelled": rep["modelled"]})
    for tenant in sorted(set(TRAFFIC)):
        got = sum(r["denied"] for r in rep["rows"] if r["tenant"] == tenant)
        print(f"  {tenant}: recorded at {LIMIT} {before[tenant]} denied; at {LIMIT // 2} live {live[tenant]}, "
              f"replay {got}")
        assert live[tenant] > before[tenant], (tenant, live[tenant], before[tenant])
        assert abs(got - live[tenant]) <= max(1, 0.10 * live[tenant]), (tenant, got, live[tenant])
