"""Reconciliation, in-flight caps and provider feedback end to end, through the real Envoy
(ext_authz + ext_proc), three ext-authz replicas on one Redis, the mock provider billing actual
usage (-charge actual) and the official SDKs. Completions use 20% of max_tokens (40 of 200).

The same load runs twice: with the shipped envoy.yaml (reconciliation on), and with the ext_proc
filter removed (reserve-only), the one deviation of that run.

Provider feedback runs apart (outside_run): an outside consumer spends half of the provider's
budget straight at the mock, bypassing Envoy, and the limiter must learn it from the provider's
x-ratelimit-remaining-tokens / anthropic-ratelimit-* headers and its 429s (retry-after). The same
run with provider_feedback off is the control that shows the test can fail."""

from __future__ import annotations

import copy
import hashlib
import math
import threading
from pathlib import Path

import pytest

import harness as h
import report as rpt
import scenarios as sc

PERIOD = 20.0
LIMIT = 20000
CAP = 6
# Anthropic's cap, below its 6 Go workers, so that it binds.
CAP_ANTHROPIC = 4
DURATION = 30.0


def _without_ext_proc(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "envoy.filters.http.ext_proc"]
    return cfg


SALT = "e2e-salt-reconcile"


def _own(*keys: str) -> str:
    """The limits file's credentials: the keys the clients send through Envoy are the operator's
    (only answers to them may correct provider_feedback rules)."""
    sums = [hashlib.sha256((SALT + k).encode()).hexdigest() for k in keys]
    return f"credentials: {{salt: {SALT}, sha256: {sums}}}\n"


_up_lock = threading.Lock()


class _Stack(h.Stack):
    reserve_only: bool = False

    def up(self):
        """The harness's up(), with the reserve-only deviation applied to the derived config. Stacks
        of this file start one at a time, so the swapped function is never seen by the other."""
        with _up_lock:
            if not self.reserve_only:
                return super().up()
            orig = h.derive_envoy_config
            h.derive_envoy_config = lambda *a, **k: _without_ext_proc(orig(*a, **k))
            try:
                return super().up()
            finally:
                h.derive_envoy_config = orig


def max_overlap(records: list[dict], provider: str) -> int:
    """The most admitted requests of provider being answered at once (from the mock's records).
    Requests Envoy let through unchecked (ext_authz failed or timed out: failure_mode_allow, the
    shipped policy) hold no lease and are left out; fail_open counts them."""
    ev = []
    for r in records:
        if r["provider"] == provider and r["status"] == 200 and not r.get("failure_mode_allowed"):
            ev += [(r["t"], 1), (r["end"], -1)]
    ev.sort(key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def reconcile_run(workdir: Path, reserve_only: bool) -> dict:
    """Refunds are per rule (refund: true): right here, since the mock bills actual usage."""
    name = "reconcile-reserve-only" if reserve_only else "reconcile"
    # Without the response path no lease is ever released: the cap would stop everything after
    # CAP requests until lease_ttl, which measures the leak, not reservation. Reserve-only runs
    # without it.
    concurrency = "" if reserve_only else f"    max_concurrent: {CAP}\n    lease_ttl: 60s"
    concurrency_a = "" if reserve_only else f"    max_concurrent: {CAP_ANTHROPIC}\n    lease_ttl: 60s"
    rules = f"""  - name: openai-per-model
    match: {{provider: openai}}
    per: [model]
    tokens: {{limit: {int(LIMIT * sc.MARGIN)}, period: {int(PERIOD)}s}}
{concurrency}
    provider_feedback: true
    refund: true
  - name: anthropic-per-model
    match: {{provider: anthropic}}
    per: [model]
    tokens: {{limit: {int(LIMIT * sc.MARGIN)}, period: {int(PERIOD)}s}}
{concurrency_a}
    provider_feedback: true
    refund: true"""
    own = _own("sk-rec-py0", "sk-rec-py1", "sk-rec-go-openai", "sk-rec-go-anthropic")
    stack = _Stack(name, workdir / name, sc.limits_yaml(rules) + own,
                   ["-mode", "token_bucket", "-period", f"{int(PERIOD)}s", "-charge", "actual",
                    "-openai-tpm", str(LIMIT), "-anthropic-tpm", str(LIMIT), "-latency", "300ms",
                    "-completion-tokens", "40"], replicas=3)
    stack.reserve_only = reserve_only
    try:
        stack.up()
        python = [{"key": f"sk-rec-py{i}", "threads": 5, "max_tokens": 200, "model": sc.OPENAI_MODEL,
                   "stream_every": 2, "offset": 3 * i} for i in range(2)]
        go = [{"provider": "openai", "key": "sk-rec-go-openai", "workers": 5, "max_tokens": 200,
               "model": sc.OPENAI_MODEL, "stream_every": 2},
              {"provider": "anthropic", "key": "sk-rec-go-anthropic", "workers": 6, "max_tokens": 200,
               "model": sc.ANTHROPIC_MODEL, "stream_every": 2}]
        summaries = sc.run_load(stack, name, DURATION, python, go)
        records = h.read_jsonl(stack.records_path)
        stats = stack.mock_stats()
        t_stop = min(s["started"] for s in summaries) + DURATION
        out = {"scenario": name, "reserve_only": reserve_only, "limit": LIMIT, "period_s": PERIOD, "cap": CAP,
               "client_totals": sc.client_totals(summaries), "providers": {}}
        for provider in ("openai", "anthropic"):
            adm = [(t, c) for t, c in rpt.admissions(records, provider) if t <= t_stop]
            t0 = adm[0][0] if adm else 0.0
            allow = rpt.allowance("token_bucket", LIMIT, PERIOD, t_stop - t0)
            mine = [r for r in records if r["provider"] == provider]
            out["providers"][provider] = {
                "admitted_actual_tokens": sum(c for _, c in adm), "allowance": round(allow),
                "admitted_over_allowance": round(sum(c for _, c in adm) / allow, 4) if allow else 0,
                "provider_429": stats["providers"].get(provider, {}).get("rate_limited", 0),
                "streamed_ok": sum(1 for r in mine if r["status"] == 200 and r.get("stream")),
                "json_ok": sum(1 for r in mine if r["status"] == 200 and not r.get("stream")),
                "max_inflight": max_overlap(records, provider),
                "fail_open": sum(1 for r in mine if r.get("failure_mode_allowed"))}
        metrics = ""
        for i in range(3):
            metrics += h.http_get(f"http://127.0.0.1:{stack.ports[f'admin-{i}']}/metrics")[1].decode()
        settled = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                      if line.startswith("llm_ratelimit_reconciled_responses_total{") and 'result="usage"' in line)
        leases = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                     if line.startswith('llm_ratelimit_leases_released_total{result="ok"}'))
        out["settled_from_usage"], out["leases_released"] = settled, leases
        out["settled_no_usage"] = _metric(metrics, "llm_ratelimit_reconciled_responses_total{", 'result="no_usage"')
        out["report"] = str(rpt.write_json(name, out))
        return out
    finally:
        stack.down()


def _metric(metrics: str, prefix: str, contains: str = "") -> float:
    """The sum of the samples of metrics (Prometheus text) starting with prefix and holding contains."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(prefix) and contains in line)


# ---------------------------------------------------------------------------------------------
# Provider feedback: an outside consumer on the same provider budget

FB_REPLICAS = 2
FB_DURATION = 40.0
# The provider's budget here, below the reconciliation runs': the clients must offer well above
# what the outside consumer leaves even when the shared machine starves them, or the control
# (feedback off) would see no 429 either.
FB_LIMIT = 12000
# The rule sits 15% below the provider's limit: between two reports the outside consumer keeps
# spending, and the margin is what absorbs it (here 1,800 tokens, 6 s of the outside consumer's
# use). With the provider kept short from the start (the outside consumer's burst), 8% still
# never took two 429s in one pause window, but isolated near misses (70-450 ms of refill short)
# recurred 12 s apart on a loaded machine.
FB_MARGIN = 0.85
# Output reserved = output used (max_tokens = the mock's completion length): the limiter's
# reservation is what the provider bills, so the run measures feedback alone, not refunds.
FB_MAX_TOKENS = 40
OUTSIDE_KEY = "sk-outside-"
# How long the outside consumer's burst lasts, ending when the load starts.
OUTSIDE_BURST_S = 3


def pause_windows(r429: list[dict]) -> tuple[list[dict], int]:
    """Groups the provider's 429s (time order) into pause windows: a 429 at t with retry-after r
    opens [t, t + r); a 429 inside an open window is an extra. Returns the windows and the extras."""
    windows, extra = [], 0
    for r in sorted(r429, key=lambda r: r["t"]):
        retry_after = max(math.ceil(r.get("wait_ms", 0) / 1000), 1)  # as the mock advertises it
        if windows and r["t"] < windows[-1]["end"]:
            windows[-1]["n"] += 1
            extra += 1
        else:
            windows.append({"t": r["t"], "end": r["t"] + retry_after, "n": 1})
    return windows, extra


def recurrences(windows: list[dict], period: float) -> int:
    """Pause windows that open less than one provider period after the previous one ended: the
    limiter had not learned (a limiter that has learned sees at most a rare, isolated 429)."""
    return sum(1 for a, b in zip(windows, windows[1:]) if b["t"] - a["end"] < period)


def outside_run(workdir: Path, feedback: bool) -> dict:
    name = "feedback" if feedback else "feedback-off"
    rules = "\n".join(f"""  - name: {p}-per-model
    match: {{provider: {p}}}
    per: [model]
    tokens: {{limit: {int(FB_LIMIT * FB_MARGIN)}, period: {int(PERIOD)}s}}
    provider_feedback: {str(feedback).lower()}""" for p in ("openai", "anthropic"))
    own = _own("sk-fb-py0", "sk-fb-go-openai", "sk-fb-go-anthropic")
    stack = _Stack(name, workdir / name, sc.limits_yaml(rules) + own,
                   ["-mode", "token_bucket", "-period", f"{int(PERIOD)}s", "-openai-tpm", str(FB_LIMIT),
                    "-anthropic-tpm", str(FB_LIMIT), "-latency", "300ms", "-completion-tokens", str(FB_MAX_TOKENS),
                    # The limiter's own Anthropic estimate (cl100k_base x 1.6): otherwise its 28%
                    # over-count of the mock's (x 1.25) acts as a margin of its own.
                    "-anthropic-factor", "1.6"],
                   replicas=FB_REPLICAS)
    try:
        stack.up()
        # The outside consumer: two Go SDK workers per provider, paced to half the provider's
        # budget (the mean price of the prompts they cycle through), no retries, straight to
        # the mock (the mock is their HTTP proxy: Envoy never sees them).
        prompts = h.prompts()
        outside = []
        for provider, model in (("openai", sc.OPENAI_MODEL), ("anthropic", sc.ANTHROPIC_MODEL)):
            mean = sum(stack.price(*sc.price_body("go", provider, model, FB_MAX_TOKENS, p))["cost"]
                       for p in prompts) / len(prompts)
            pace = 2 * mean / (FB_LIMIT / 2 / PERIOD)
            outside.append({"provider": provider, "key": OUTSIDE_KEY + provider, "workers": 2,
                            "max_tokens": FB_MAX_TOKENS, "model": model, "stream_every": 0, "max_retries": 0,
                            "pace": f"{pace:.3f}s", "proxy": stack.mock_url})
            # And, just before the load, a paced burst that spends half the provider's capacity
            # (plus half the refill meanwhile): half the budget is the capacity's half as well as
            # the rate's. The provider is then short from the first seconds, not only once its
            # capacity has drained at the paced consumer's rate (which takes about the whole run:
            # without feedback a CI run once saw no 429 at all on one provider).
            burst_pace = OUTSIDE_BURST_S * 8 * mean / (0.5 * FB_LIMIT * (1 + OUTSIDE_BURST_S / PERIOD))
            outside.append({"provider": provider, "key": OUTSIDE_KEY + provider, "workers": 8,
                            "max_tokens": FB_MAX_TOKENS, "model": model, "stream_every": 0, "max_retries": 0,
                            "pace": f"{burst_pace:.3f}s", "lead": OUTSIDE_BURST_S, "proxy": stack.mock_url})
        # Through Envoy: OpenAI from Python and Go, Anthropic from Go, JSON and SSE, offering
        # several times what is left of the budget.
        python = [{"key": "sk-fb-py0", "threads": 2, "max_tokens": FB_MAX_TOKENS, "model": sc.OPENAI_MODEL,
                   "stream_every": 2}]
        go = [{"provider": "openai", "key": "sk-fb-go-openai", "workers": 3, "max_tokens": FB_MAX_TOKENS,
               "model": sc.OPENAI_MODEL, "stream_every": 2, "offset": 1},
              {"provider": "anthropic", "key": "sk-fb-go-anthropic", "workers": 6, "max_tokens": FB_MAX_TOKENS,
               "model": sc.ANTHROPIC_MODEL, "stream_every": 2}] + outside
        summaries = sc.run_load(stack, name, FB_DURATION, python, go)
        records = h.read_jsonl(stack.records_path)
        ours = [s for s in summaries if not s["key"].startswith(OUTSIDE_KEY)]
        t_start = min(s["started"] for s in ours)
        out = {"scenario": name, "provider_feedback": feedback, "limit": FB_LIMIT, "period_s": PERIOD,
               "duration_s": FB_DURATION, "client_totals": sc.client_totals(ours),
               "outside_totals": sc.client_totals([s for s in summaries if s["key"].startswith(OUTSIDE_KEY)]),
               "providers": {}}
        for provider in ("openai", "anthropic"):
            mine = [r for r in records if r["provider"] == provider]
            via_envoy = [r for r in mine if not r.get("key", "").startswith(OUTSIDE_KEY)]
            r429 = [r for r in via_envoy if r["status"] == 429 and not r.get("too_large")]
            windows, extra = pause_windows(r429)
            adm_all = [(t, c) for t, c in rpt.admissions(records, provider) if t <= t_start + FB_DURATION]
            allow = rpt.allowance("token_bucket", FB_LIMIT, PERIOD, adm_all[-1][0] - adm_all[0][0]) if adm_all else 0
            half = t_start + FB_DURATION / 2
            out["providers"][provider] = {
                "provider_429": len(r429),
                "provider_429_times": [round(r["t"] - t_start, 2) for r in sorted(r429, key=lambda r: r["t"])],
                "pause_windows": len(windows),
                "extra_429_in_a_window": extra,
                "recurring_windows": recurrences(windows, PERIOD),
                "shortfall_ms": [r.get("wait_ms", 0) for r in sorted(r429, key=lambda r: r["t"])],
                "provider_429_second_half": sum(1 for r in r429 if r["t"] >= half),
                "admitted_via_envoy_tokens": sum(r["cost"] for r in via_envoy if r["status"] == 200),
                "admitted_outside_tokens": sum(r["cost"] for r in mine if r["status"] == 200 and r not in via_envoy),
                "outside_429": sum(1 for r in mine if r["status"] == 429 and r not in via_envoy),
                "admitted_over_allowance": round(sum(c for _, c in adm_all) / allow, 4) if allow else 0,
                "streamed_ok": sum(1 for r in via_envoy if r["status"] == 200 and r.get("stream")),
                "json_ok": sum(1 for r in via_envoy if r["status"] == 200 and not r.get("stream")),
            }
        metrics = "".join(h.http_get(f"http://127.0.0.1:{stack.ports[f'admin-{i}']}/metrics")[1].decode()
                          for i in range(FB_REPLICAS))
        out["corrections_lower"] = _metric(metrics, "llm_ratelimit_provider_corrections_total{", 'kind="lower"')
        out["corrections_pause"] = _metric(metrics, "llm_ratelimit_provider_corrections_total{", 'kind="pause"')
        out["report"] = str(rpt.write_json(name, out))
        return out
    finally:
        stack.down()


def on_and_off(run, on_arg: bool) -> dict:
    """Runs a scenario with the feature on (run(dir, on_arg)) and off (run(dir, not on_arg)) at
    once, each on its own stack."""
    d = rpt.REPORT_DIR / "run"
    d.mkdir(parents=True, exist_ok=True)
    return h.at_once(600, on=lambda: run(d, on_arg), off=lambda: run(d, not on_arg))


@pytest.fixture(scope="module")
def feedback_runs():
    return on_and_off(outside_run, True)


def test_outside_consumer_at_most_one_provider_429_per_pause_window_then_none(feedback_runs):
    on, off = feedback_runs["on"], feedback_runs["off"]
    # A store timeout on this shared 2-core machine is a 503 (failure.mode deny) the SDK retries
    # twice; one may still surface. Nothing else may.
    t = on["client_totals"]
    assert t["errors"] <= 0.01 * t["calls"] and all(" 503 " in e for e in t["error_samples"]), t
    for provider in ("openai", "anthropic"):
        p, q = on["providers"][provider], off["providers"][provider]
        assert p["streamed_ok"] > 0 and p["json_ok"] > 0, (provider, p)
        # The outside consumer really spent from the same budget.
        assert p["admitted_outside_tokens"] >= 0.3 * FB_LIMIT * FB_DURATION / PERIOD / 2, (provider, p)
        # The claim under test: at most one provider 429 per pause window, then none: no second 429
        # in a window, and no window within a provider period after the last one.
        assert p["extra_429_in_a_window"] == 0, (provider, p)
        assert p["recurring_windows"] == 0, (provider, p)
        assert p["provider_429"] <= FB_DURATION / PERIOD, (provider, p)
        # Without feedback the limiter keeps admitting what the provider no longer has: 429s in
        # bursts, window after window.
        assert q["provider_429"] >= 5 and q["extra_429_in_a_window"] >= 1 and q["recurring_windows"] >= 1, (provider, q)
        # Feedback does not starve the limiter: the budget stays in use.
        assert p["admitted_over_allowance"] >= 0.8, (provider, p)
    assert on["corrections_lower"] > 0 and off["corrections_lower"] == 0 and off["corrections_pause"] == 0, (on, off)


@pytest.fixture(scope="module")
def runs():
    return on_and_off(reconcile_run, False)  # reconcile_run's argument is reserve_only


def test_reconciliation_reaches_the_provider_limit_without_429(runs):
    on, off = runs["on"], runs["off"]
    assert on["client_totals"]["errors"] == 0, on["client_totals"]["error_samples"]
    for provider in ("openai", "anthropic"):
        p, q = on["providers"][provider], off["providers"][provider]
        assert p["provider_429"] == 0, (provider, p)
        assert p["streamed_ok"] > 0 and p["json_ok"] > 0, (provider, p)
        # Near the limit: OpenAI 0.90-0.97 and Anthropic 0.96-0.97 of the allowance in nine CI
        # runs; how close depends on when the SDKs' retries land on a shared 2-core machine, so
        # the bar leaves room below the lowest (0.8985), well above reserve-only's <= 0.6.
        assert p["admitted_over_allowance"] >= 0.85, (provider, p, q)
        # Reserve-only leaves most of the budget idle: completions use 20% of max_tokens, so at
        # most (prompt + 40) / (prompt + 200) of what is reserved is used.
        assert q["admitted_over_allowance"] <= 0.6, (provider, q)
        assert q["provider_429"] == 0, (provider, q)
    assert on["settled_from_usage"] > 0 and off["settled_from_usage"] == 0, (on, off)


def test_inflight_caps_hold_across_three_replicas(runs):
    on = runs["on"]
    o = on["providers"]["openai"]
    # The clients offer 10 at once; the provider never sees more than the cap (its own view is
    # narrower than the lease, which runs from the check to the end of the response path).
    assert 3 <= o["max_inflight"] <= CAP, o
    a = on["providers"]["anthropic"]
    assert 3 <= a["max_inflight"] <= CAP_ANTHROPIC, a
    assert on["leases_released"] > 0, on
