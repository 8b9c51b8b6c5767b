"""No client can make a check miss its deadline: the hostile-client rows 5 and 12 end to end,
through the real Envoy running the shipped envoy/envoy.yaml (addresses swapped by the harness),
two ext-authz replicas on one Redis, the mock provider and the official openai SDK. Each attack
runs next to a control with the defence off, which shows what the attack did, so the test can
fail.

Row 5, slow bodies: 40 concurrent requests of 900 KiB of random base64-like text (the kind of
text the exact counter is slowest on, about 0.1 ms per KiB on an idle core, and over the 64 KiB
Envoy buffers for a retry), under internal/config/example.yaml (30,000 tokens per minute per OpenAI model,
10,000 per tenant). Shipped: a large body finds a pricing slot or is priced at its upper bound at
once, so every check answers in time; none passes unpriced, the provider admits none of them
(each is above any bucket: 413), and another tenant's small calls are answered, none 503. The
control runs the replicas with -pricing-slots -1 (every body counted exactly, however long it
takes) and a burst of 120 such bodies: the checks pass Envoy's per-try timeout and
failure_mode_allow forwards them unpriced.

Row 12, holds: a rule with max_wait 450ms holds requests for their budget; the clients pad each
body with 100 KiB of JSON whitespace so that Envoy cannot retry a cut attempt. Shipped (per-try
timeout = the 1s ext_authz timeout = the service's -check-timeout): every hold ends within its
attempt, the provider admits no more than the budget. The control is the stack as it shipped
before: a per-try timeout of 0.4s that the service did not know (it still assumes 1s): holds
are cut by Envoy, refunded, and forwarded unpriced, beyond the budget. With -check-timeout
0.4s, the same limits file fails the service's start-up.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import json
import random
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import openai
import pytest

import clientnet
import harness as h
import report as rpt
import scenarios as sc

WORKDIR = rpt.REPORT_DIR / "run"
STAT_FAIL_OPEN = "http.egress.ext_authz.llm_ratelimit.failure_mode_allowed"
EXAMPLE_LIMITS = (h.ROOT / "internal" / "config" / "example.yaml").read_text()

# Row 5
BODIES = 40
# The control's burst: three times the attack, so that exact counts overrun the attempt however
# idle the machine is (40 of them can all finish within it when nothing else runs).
CONTROL_BODIES = 120
BODY_BYTES = 900 << 10  # the whole body within max_request_bytes (1 MiB)
# gpt-4.1: its 1,047,576-token context window holds a 900 KiB body, so what fails open is
# admitted by the provider rather than refused as too long for the model.
MODEL = "gpt-4.1"
BUDGET_MODEL = 30000  # example.yaml: openai-per-model, tokens per minute
# Row 12
HOLD_LIMIT, HOLD_PERIOD_S, MAX_WAIT = 20, 2, "450ms"
HOLD_THREADS, HOLD_SECONDS = 8, 4.0
PAD = 100 << 10

_up_lock = threading.Lock()


class _Stack(h.Stack):
    """The harness's stack, with an optional change to the derived Envoy config (the control's one
    deviation). Stacks of this file start one at a time, so the swapped function is never seen by
    another."""

    per_try: str | None = None

    def up(self):
        with _up_lock:
            if self.per_try is None:
                return super().up()
            orig = h.derive_envoy_config

            def derive(*a, **k):
                cfg = orig(*a, **k)
                h.ext_authz_filter(cfg)["grpc_service"]["retry_policy"]["retry_back_off"]["max_interval"] = self.per_try
                return cfg

            h.derive_envoy_config = derive
            try:
                return super().up()
            finally:
                h.derive_envoy_config = orig


def _sdk(stack: h.Stack, key: str, source: str) -> openai.OpenAI:
    """The SDK connecting from source: the shipped envoy.yaml names the tenant by that address."""
    return openai.OpenAI(api_key=key, base_url="http://api.openai.com/v1", max_retries=0, timeout=60.0,
                         http_client=openai.DefaultHttpx2Client(transport=clientnet.transport(stack.proxy, source)))


def _random_text(n: int, seed: int) -> str:
    """n characters of base64 of random bytes: nearly every piece misses the counter's caches."""
    return base64.b64encode(random.Random(seed).randbytes(n * 3 // 4 + 3)).decode()[:n]


def _access_log(stack: h.Stack, pred, n: int, timeout: float = 10.0) -> list[dict]:
    """Envoy's access-log entries matching pred, waiting until n of them were flushed."""
    deadline = time.time() + timeout
    while True:
        hits = [e for e in h.read_jsonl(stack.access_log_path) if pred(e)]
        if len(hits) >= n or time.time() > deadline:
            return hits
        time.sleep(0.2)


def slow_bodies_run(defence: bool) -> dict:
    name = "hostile-deadline-bodies" + ("" if defence else "-control")
    stack = h.Stack(name, WORKDIR / name, EXAMPLE_LIMITS,
                    ["-mode", "token_bucket", "-openai-tpm", "100000000", "-latency", "50ms",
                     "-completion-tokens", "8", "-max-counted-bytes", "65536"],
                    replica_args=[] if defence else ["-pricing-slots", "-1"])
    out: dict = {"scenario": name, "defence": defence}
    n = BODIES if defence else CONTROL_BODIES
    try:
        stack.up()
        texts = [_random_text(BODY_BYTES, i) for i in range(n)]
        hostile = _sdk(stack, "sk-hostile", "127.0.0.31")
        victim = _sdk(stack, "sk-victim", "127.0.0.32")
        start = threading.Barrier(n + 1)

        def attack(i: int) -> int:
            start.wait()
            try:
                r = hostile.chat.completions.with_raw_response.create(
                    model=MODEL, max_tokens=100, messages=[{"role": "user", "content": texts[i]}])
                return r.status_code
            except openai.APIStatusError as e:
                return e.status_code

        def victim_calls() -> list[int]:
            start.wait()
            codes = []
            for _ in range(6):
                try:
                    r = victim.chat.completions.with_raw_response.create(
                        model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "Say hi."}])
                    codes.append(r.status_code)
                except openai.APIStatusError as e:
                    codes.append(e.status_code)
            return codes

        with cf.ThreadPoolExecutor(n + 1) as pool:
            v = pool.submit(victim_calls)
            codes = list(pool.map(attack, range(n)))
            out["victim_statuses"] = v.result()
        out["attack_statuses"] = codes
        records = h.read_jsonl(stack.records_path)
        out["fail_open_stat"] = stack.envoy_stat(STAT_FAIL_OPEN)
        out["provider_fail_open"] = sum(1 for r in records if r.get("failure_mode_allowed"))
        attack_records = [r for r in records if r.get("key") == "sk-hostile"]
        out["provider_admitted_attack"] = sum(1 for r in attack_records if r["status"] == 200)
        out["provider_admitted_tokens"] = sum(r["cost"] for r in records if r["status"] == 200 and r["provider"] == "openai")
        log = _access_log(stack, lambda e: (e.get("request_bytes") or 0) > 64 << 10, n)
        out["attack_logged"] = len(log)
        out["attack_priced"] = sum(1 for e in log if sc.meta(e, "decision"))
        out["attack_decisions"] = sorted({str(sc.meta(e, "decision")) for e in log})
        out["attack_reasons"] = sorted({str(sc.meta(e, "estimate_reason")) for e in log})
        out["slowest_ms"] = max((int(e.get("duration_ms") or 0) for e in log), default=0)
        return out
    finally:
        (rpt.REPORT_DIR / f"{name}.json").write_text(json.dumps(out, indent=1))
        stack.down()


def holds_run(defence: bool) -> dict:
    name = "hostile-deadline-holds" + ("" if defence else "-control")
    rules = f"""  - name: held
    match: {{provider: openai}}
    requests: {{limit: {HOLD_LIMIT}, period: {HOLD_PERIOD_S}s}}
    max_wait: {MAX_WAIT}"""
    stack = _Stack(name, WORKDIR / name, sc.limits_yaml(rules),
                   ["-mode", "token_bucket", "-openai-tpm", "100000000", "-latency", "20ms", "-completion-tokens", "8"])
    if not defence:
        stack.per_try = "0.4s"  # the per-try timeout envoy.yaml shipped with, unknown to the service
    out: dict = {"scenario": name, "defence": defence}
    try:
        stack.up()
        body = json.dumps({"model": sc.OPENAI_MODEL, "max_tokens": 10,
                           "messages": [{"role": "user", "content": "Say hi."}]})
        padded = (body[:-1] + " " * PAD + "}").encode()
        stop_at = time.time() + HOLD_SECONDS
        counts = {"ok": 0, "rate_limited": 0, "other": 0}
        lock = threading.Lock()

        def worker() -> None:
            c = httpx2.Client(proxy=stack.proxy, trust_env=False, timeout=30)
            while time.time() < stop_at:
                r = c.post("http://api.openai.com/v1/chat/completions", content=padded,
                           headers={"content-type": "application/json", "authorization": "Bearer sk-held"})
                k = "ok" if r.status_code == 200 else "rate_limited" if r.status_code == 429 else "other"
                with lock:
                    counts[k] += 1

        with cf.ThreadPoolExecutor(HOLD_THREADS) as pool:
            for f in [pool.submit(worker) for _ in range(HOLD_THREADS)]:
                f.result()
        time.sleep(0.5)  # the last answers' records
        admitted = sorted(r["t"] for r in h.read_jsonl(stack.records_path) if r["status"] == 200)
        span = admitted[-1] - admitted[0] if admitted else 0.0
        out.update(counts)
        out["admitted"] = len(admitted)
        # A token bucket of HOLD_LIMIT requests refilling HOLD_LIMIT per period: the most it lets
        # through between the first and the last admission, plus 0.2 s of refill: the provider sees
        # each request a little after its debit, and the first may be later than the last.
        out["allowance"] = HOLD_LIMIT + int((span + 0.2) * HOLD_LIMIT / HOLD_PERIOD_S) + 1
        out["fail_open_stat"] = stack.envoy_stat(STAT_FAIL_OPEN)
        out["provider_fail_open"] = sum(1 for r in h.read_jsonl(stack.records_path) if r.get("failure_mode_allowed"))
        out["delayed"] = sum(1 for e in h.read_jsonl(stack.access_log_path) if sc.meta(e, "decision") == "delayed")
        return out
    finally:
        (rpt.REPORT_DIR / f"{name}.json").write_text(json.dumps(out, indent=1))
        stack.down()


# One stack at a time: the controls measure what CPU contention does to checks, and two stacks at
# once would measure each other.
@pytest.fixture(scope="module")
def bodies():
    WORKDIR.mkdir(parents=True, exist_ok=True)
    return {"bodies": slow_bodies_run(True), "bodies-control": slow_bodies_run(False)}


@pytest.fixture(scope="module")
def holds():
    WORKDIR.mkdir(parents=True, exist_ok=True)
    return {"holds": holds_run(True), "holds-control": holds_run(False)}


def test_slow_bodies_never_pass_unpriced(bodies):
    r = bodies["bodies"]
    assert r["fail_open_stat"] == 0 and r["provider_fail_open"] == 0, r
    assert r["attack_logged"] == BODIES and r["attack_priced"] == BODIES, r
    # Each body is above the 30,000-token bucket, exactly counted or at its bound: 413, never sent.
    assert r["attack_decisions"] == ["too_large"] and set(r["attack_statuses"]) == {413}, r
    assert r["provider_admitted_attack"] == 0 and r["provider_admitted_tokens"] <= BUDGET_MODEL, r
    assert "deadline" in r["attack_reasons"], r  # most were priced at their bound


def test_slow_bodies_other_tenants_answered(bodies):
    r = bodies["bodies"]
    assert r["victim_statuses"] and all(s in (200, 429) for s in r["victim_statuses"]), r
    assert 200 in r["victim_statuses"], r


def test_slow_bodies_control_fails_open(bodies):
    """Without the bound, the checks miss Envoy's attempt and the shipped failure mode forwards
    them unpriced: the provider admits far beyond the budget."""
    r = bodies["bodies-control"]
    assert r["fail_open_stat"] >= BODIES // 4 and r["provider_fail_open"] >= BODIES // 4, r
    assert r["provider_admitted_tokens"] > BUDGET_MODEL, r


def test_holds_end_within_the_attempt(holds):
    r = holds["holds"]
    assert r["delayed"] > 0, r  # requests were held
    assert r["fail_open_stat"] == 0 and r["provider_fail_open"] == 0, r
    assert r["admitted"] <= r["allowance"], r
    assert r["other"] == 0, r


def test_holds_control_cut_by_envoy(holds):
    """With a per-try timeout the service does not know, Envoy cuts holds, the reservation is given
    back and the request forwarded unpriced: beyond the budget."""
    r = holds["holds-control"]
    assert r["fail_open_stat"] > 0 and r["provider_fail_open"] > 0, r
    assert r["admitted"] > r["allowance"], r


def test_unhonourable_max_wait_fails_startup(tmp_path: Path):
    limits = tmp_path / "limits.yaml"
    limits.write_text(sc.limits_yaml(f"""  - name: held
    requests: {{limit: {HOLD_LIMIT}, period: {HOLD_PERIOD_S}s}}
    max_wait: {MAX_WAIT}"""))
    p = subprocess.run([str(h.BIN / "ext-authz"), "serve", "-config", str(limits), "-grpc-addr", "127.0.0.1:0",
                        "-admin-addr", "", "-check-timeout", "400ms"], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "rules[0].max_wait: 450ms cannot be honoured" in p.stderr, p.stderr
