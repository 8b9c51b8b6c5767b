"""Hostile clients against the response path, through the real Envoy: leases, Envoy's own
replies and foreign credentials (rows 7, 8 and 11 of "what a client cannot do").

- **An abort before the provider's first byte leaks no lease**: ext_proc opens its stream with
  the request headers, so the abort ends a stream, and its end releases the max_concurrent slot.
- **Envoy's own timeout is not a provider error**: a route timeout during a long generation is
  answered 504 by Envoy while the provider goes on and bills; response.code_details
  (response_timeout, not via_upstream) tells it apart from the provider's 504 and nothing is
  refunded.
- **A foreign key's answers change nothing**: a client's own exhausted key gets the provider's
  429 and low remaining headers for its own budget; only answers to the operator's credential
  (by salted hash) correct the provider_feedback bucket.

Two stacks run at once on the same limits and mock, each with two ext-authz replicas on one
Redis: the shipped envoy.yaml, and the control with the three defences off (ext_proc's request
headers skipped, no response attribute, the foreign key counted as the operator's). Both deviate
from the shipped file in one way: the OpenAI routes' timeout is 2 s instead of 600 s, so that a
"long generation" takes seconds.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import hashlib
import threading
import time

import pytest

import harness as h
import report
import scenarios as sc

RUN_DIR = report.REPORT_DIR / "run"
ROUTE_TIMEOUT = "2s"
SALT = "e2e-salt-leases"
OWN, FOREIGN = "sk-own-operator", "sk-foreign-exhausted"
ABORT_KEY, LONG_KEY, VICTIM = "sk-abort", "sk-long", "sk-victim"
CAP_MODEL, BUDGET_MODEL, MIRROR_MODEL = "gpt-4o-mini", "gpt-4o", "gpt-4o-2024-08-06"
BUDGET = 3000
FOREIGN_TPM = 3000


def _sha(key: str) -> str:
    return hashlib.sha256((SALT + key).encode()).hexdigest()


def _limits(control: bool) -> str:
    own = [_sha(OWN)] + ([_sha(FOREIGN)] if control else [])
    rules = f"""  - name: cap
    match: {{provider: openai, model: {CAP_MODEL}}}
    max_concurrent: 2
  - name: budget
    match: {{provider: openai, model: {BUDGET_MODEL}}}
    tokens: {{limit: {BUDGET}, period: minute}}
    refund: true
  - name: mirror
    match: {{provider: openai, model: {MIRROR_MODEL}}}
    per: [model]
    tokens: {{limit: 20000, period: minute}}
    provider_feedback: true"""
    return sc.limits_yaml(rules) + f"credentials: {{salt: {SALT}, sha256: {own}}}\n"


def _hcm(cfg: dict) -> dict:
    return cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


def _deviate(cfg: dict, control: bool) -> dict:
    cfg = copy.deepcopy(cfg)
    hcm = _hcm(cfg)
    for vh in hcm["route_config"]["virtual_hosts"]:
        if vh["name"] == "openai":
            for r in vh["routes"]:
                if r["route"].get("timeout") == "600s":
                    r["route"]["timeout"] = ROUTE_TIMEOUT
    if control:
        proc = h.ext_proc_filter(cfg)
        proc["processing_mode"]["request_header_mode"] = "SKIP"
        proc.pop("response_attributes")
    return cfg


_up_lock = threading.Lock()


class _Stack(h.Stack):
    defences_off: bool = False

    def up(self):
        """The harness's up() with this file's deviation applied to the derived config. Stacks of
        this file start one at a time, so the swapped function is never seen by another."""
        with _up_lock:
            orig = h.derive_envoy_config
            h.derive_envoy_config = lambda *a, **k: _deviate(orig(*a, **k), self.defences_off)
            try:
                return super().up()
            finally:
                h.derive_envoy_config = orig


def _client(stack: h.Stack, key: str, timeout: float = 30.0):
    import openai

    return openai.OpenAI(api_key=key, base_url="http://api.openai.com/v1", max_retries=0, timeout=timeout,
                         http_client=openai.DefaultHttpx2Client(proxy=stack.proxy, trust_env=False))


def _call(stack: h.Stack, key: str, model: str, max_tokens: int, timeout: float = 30.0) -> int:
    """One chat completion through Envoy with the official SDK; the HTTP status it ended with."""
    import openai

    try:
        _client(stack, key, timeout).chat.completions.create(
            model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": "Say hello."}])
        return 200
    except openai.APIStatusError as e:
        return e.status_code
    except openai.APITimeoutError:
        return 0  # the client gave up: an abort


def _records(stack: h.Stack, key: str) -> list[dict]:
    return [r for r in h.read_jsonl(stack.records_path) if r.get("key") == key]


def _run(control: bool) -> dict:
    name = "hostile-leases-control" if control else "hostile-leases"
    stack = _Stack(name, RUN_DIR / name, _limits(control),
                   ["-mode", "token_bucket", "-openai-tpm", "1000000", "-latency", "50ms", "-completion-tokens", "8",
                    "-key-latency", f"{ABORT_KEY}=1500ms,{LONG_KEY}=4s", "-key-tpm", f"{FOREIGN}={FOREIGN_TPM}"],
                   replicas=2)
    stack.defences_off = control
    out: dict = {"control": control}
    try:
        stack.up()
        # Row 7: three aborts before the provider's first byte (the client gives up after 0.5 s,
        # the provider answers after 1.5 s), then a victim on the same cap of 2.
        out["aborts"] = [_call(stack, ABORT_KEY, CAP_MODEL, 16, timeout=0.5) for _ in range(3)]
        t0 = time.monotonic()
        window = 8.0 if not control else 12.0
        victim = []
        while time.monotonic() - t0 < window:
            victim.append(_call(stack, VICTIM, CAP_MODEL, 16))
            if victim[-1] == 200:
                break
            time.sleep(0.25)  # a retry pace, not a synchronisation: each try is the condition
        out["victim"], out["victim_after_s"] = victim, round(time.monotonic() - t0, 2)
        out["victim_admitted_by_provider"] = sum(1 for r in _records(stack, VICTIM) if r["status"] == 200)
        out["no_response"] = stack.metric("llm_ratelimit_reconciled_responses_total", 'result="no_response"')

        # Row 8: generations longer than the route timeout, in two waves of three.
        with cf.ThreadPoolExecutor(3) as pool:
            out["wave1"] = list(pool.map(lambda _: _call(stack, LONG_KEY, BUDGET_MODEL, 900), range(3)))
        settled = lambda: sum(stack.metric("llm_ratelimit_reconciled_responses_total", f'result="{r}"')  # noqa: E731
                              for r in ("upstream_error", "local_reply", "no_usage"))
        h.wait_until(lambda: settled() >= 3, 15, "the timed-out responses settled")
        with cf.ThreadPoolExecutor(3) as pool:
            out["wave2"] = list(pool.map(lambda _: _call(stack, LONG_KEY, BUDGET_MODEL, 900), range(3)))
        long = [r for r in _records(stack, LONG_KEY) if r["status"] == 200]
        out["long_admitted_by_provider"] = len(long)
        out["long_admitted_tokens"] = sum(r["cost"] for r in long)
        out["local_reply"] = stack.metric("llm_ratelimit_reconciled_responses_total", 'result="local_reply"')
        # Envoy writes its access log file on its flush interval: wait for the timed-out calls' lines.
        timed_out = lambda: [e for e in sc.access_log(stack) if e.get("status") in (504, "504")]  # noqa: E731
        h.wait_until(lambda: len(timed_out()) >= 3, 15, "the 504s in Envoy's access log", stack.procs["envoy"])
        out["timeout_details"] = sorted({str(e.get("details")) for e in timed_out()})

        # Row 11: a client with its own key, exhausted at the provider, then the operator's key.
        settled0 = stack.metric("llm_ratelimit_reconciled_responses_total", 'result="')
        foreign = []
        for _ in range(4):
            foreign.append(_call(stack, FOREIGN, MIRROR_MODEL, 1000))
            if foreign[-1] == 429:
                break
        out["foreign"] = foreign
        reached = len(_records(stack, FOREIGN))
        h.wait_until(lambda: stack.metric("llm_ratelimit_reconciled_responses_total", 'result="') - settled0 >= reached,
                     15, "the foreign key's answers settled")
        out["foreign_at_provider"] = [r["status"] for r in _records(stack, FOREIGN)]
        out["corrections_before_victim"] = stack.metric("llm_ratelimit_provider_corrections_total")
        out["reconcile_metrics"] = [line for i in range(stack.replicas) for line in h.http_get(
            f"http://127.0.0.1:{stack.ports[f'admin-{i}']}/metrics")[1].decode().splitlines()
            if line.startswith(("llm_ratelimit_reconcile", "llm_ratelimit_provider"))]
        out["own"] = _call(stack, OWN, MIRROR_MODEL, 1000)
        out["own_admitted_by_provider"] = sum(1 for r in _records(stack, OWN) if r["status"] == 200)
        report.write_json(name, out)
        return out
    finally:
        stack.down()


@pytest.fixture(scope="module")
def runs():
    with cf.ThreadPoolExecutor(2) as pool:
        on, off = pool.submit(_run, False), pool.submit(_run, True)
        return {"on": on.result(timeout=300), "off": off.result(timeout=300)}


def test_abort_before_first_byte_leaks_no_lease(runs):
    on, off = runs["on"], runs["off"]
    # The aborts really were aborts (the client gave up), and held the cap.
    assert all(s in (0, 429) for s in on["aborts"]) and 0 in on["aborts"], on
    assert on["victim"][-1] == 200 and on["victim_admitted_by_provider"] == 1, on
    assert on["no_response"] >= 1, on
    # Control: with the request headers skipped no stream exists until a response starts, and the
    # slots stay taken (for lease_ttl, 10 minutes): every try of the victim is refused.
    assert off["victim"] and all(s == 429 for s in off["victim"]), off
    assert off["victim_admitted_by_provider"] == 0 and off["no_response"] == 0, off


def test_envoy_timeout_is_not_refunded(runs):
    on, off = runs["on"], runs["off"]
    assert on["wave1"] == [504, 504, 504], on
    assert "response_timeout" in on["timeout_details"], on
    assert on["local_reply"] >= 3, on
    # The provider admitted (and bills) only what the budget holds; the second wave is refused.
    assert on["wave2"] == [429, 429, 429], on
    assert on["long_admitted_tokens"] <= BUDGET and on["long_admitted_by_provider"] == 3, on
    # Control: each 504 refunded in full, so the same budget let twice as much reach the provider.
    assert off["wave2"] == [504, 504, 504], off
    assert off["long_admitted_tokens"] > BUDGET, off


def test_foreign_key_feedback_changes_nothing(runs):
    on, off = runs["on"], runs["off"]
    # The foreign key was exhausted at the provider: it got the provider's own 429.
    assert 429 in on["foreign_at_provider"], on
    assert on["corrections_before_victim"] == 0, on
    assert on["own"] == 200 and on["own_admitted_by_provider"] == 1, on
    # Control: the same answers, taken as the operator's, lower and pause the shared bucket: the
    # operator's own next request is refused by the limiter and never reaches the provider.
    assert off["corrections_before_victim"] >= 1, off
    # The lowered (or paused) shared bucket then refuses: the operator's own request, or already
    # the foreign key's next one, which the provider would have admitted (it refused none).
    limiter_refused = off["foreign"][-1] == 429 and 429 not in off["foreign_at_provider"]
    assert (off["own"] == 429 and off["own_admitted_by_provider"] == 0) or limiter_refused, off
