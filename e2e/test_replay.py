"""Recording a run through the real Envoy and replaying it offline.

Two ext-authz replicas on one Redis, each with its own -decision-log, behind the shipped
envoy.yaml and the mock provider (billing actual usage, so that the response path settles).
Requests go through Envoy one after the other; then `ext-authz replay` runs both replicas' logs,
merged, against the same limits and must find what Envoy's clients saw: the same outcome for at
least 95% of the requests, the totals within 2% (the live run's clock is Redis's, the replay's
the recorded times), and no key or prompt in the logs.

The client pauses a few milliseconds after each response. The response path settles in
observability mode, as the response passes (docs/decisions.md): a next request sent at once
races its predecessor's refund in the live run itself, and whichever reached Redis first
decided; the log orders them by when the store answered each, which such a race can invert.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

import harness as h
import report
import scenarios as sc

RUN_DIR = report.REPORT_DIR / "run"
KEY = "sk-replay-secret-key"
PROMPT = "a replayed prompt that must never be written"
N = 60
PAUSE = 0.005


@pytest.fixture(scope="module")
def stack():
    rules = """  - name: per-tenant
    per: [tenant]
    tokens: {limit: 1200, period: minute}
    refund: true"""
    workdir = RUN_DIR / "replay"
    s = h.Stack("replay", workdir, sc.limits_yaml(rules, tenant="{source: header, header: x-tenant-id}"),
                ["-mode", "token_bucket", "-openai-tpm", "100000000", "-latency", "20ms",
                 "-completion-tokens", "30", "-charge", "actual"], replicas=2,
                replica_args=["-decision-log", str(workdir / "decisions-{i}.log")])
    for i in range(2):
        (workdir / f"decisions-{i}.log").unlink(missing_ok=True)
    try:
        s.up()
        yield s
    finally:
        s.down()


def _post(stack: h.Stack, body: bytes) -> int:
    req = urllib.request.Request("http://api.openai.com/v1/chat/completions", data=body, method="POST")
    req.add_header("content-type", "application/json")
    req.add_header("authorization", "Bearer " + KEY)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": stack.proxy}))
    try:
        with opener.open(req, timeout=30) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


def test_replay_reproduces_recorded_run(stack):
    body = json.dumps({"model": sc.OPENAI_MODEL, "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": 400}).encode()
    statuses = []
    for _ in range(N):
        statuses.append(_post(stack, body))
        time.sleep(PAUSE)
    allowed, denied = statuses.count(200), statuses.count(429)
    assert allowed + denied == N, statuses
    assert allowed > 0 and denied > 0, f"{allowed} allowed, {denied} denied: the run must do both"
    # SIGTERM drains each replica and writes out its log.
    for i in range(2):
        stack.replica(i).stop(grace=10)
    logs = [stack.dir / f"decisions-{i}.log" for i in range(2)]
    text = "".join(p.read_text() for p in logs if p.exists())
    assert text.count('"ev":"decision"') == N, text[:2000]
    assert text.count('"ev":"settlement"') == allowed, text[:2000]
    assert KEY not in text and "replay-secret" not in text and PROMPT not in text
    out = subprocess.run([str(h.BIN / "ext-authz"), "replay", "-config", str(stack.dir / "limits.yaml"), "-json",
                          *[str(p) for p in logs if p.exists()]], capture_output=True, text=True, timeout=120, check=True)
    rep = json.loads(out.stdout)
    got_admitted = sum(r["allowed"] + r["held"] for r in rep["rows"])
    got_denied = sum(r["denied"] for r in rep["rows"])
    # Every request admitted live has its settlement in the log, so the recorded settlements the
    # replay applied are the requests both admitted; the rest of either side's admissions differ.
    both = rep["settled"]
    differ = (allowed - both) + (got_admitted - both)
    print(f"live: {allowed} allowed, {denied} denied; replay: {got_admitted} admitted, {got_denied} denied, "
          f"{both} settlements applied, {rep['modelled']} modelled; {differ} of {N} outcomes differ")
    assert rep["decisions"] == N
    assert differ <= 0.05 * N, (differ, N)
    assert abs(got_admitted - allowed) <= max(1, 0.02 * N), (got_admitted, allowed)
    assert abs(got_denied - denied) <= max(1, 0.02 * N), (got_denied, denied)
