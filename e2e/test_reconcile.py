"""Issue 9 end to end: reconciliation, in-flight caps and provider feedback through the real Envoy
(ext_authz + ext_proc), three ext-authz replicas on one Redis, the mock provider billing actual
usage (-charge actual) and the official SDKs. Completions use 20% of max_tokens (40 of 200).

The same load runs twice: with the shipped envoy.yaml (reconciliation on), and with the ext_proc
filter removed (reserve-only), the one deviation of that run."""

from __future__ import annotations

import concurrent.futures as cf
import copy
import threading
from pathlib import Path

import pytest

import harness as h
import report as rpt
import scenarios as sc

PERIOD = 20.0
LIMIT = 20000
CAP = 6
DURATION = 30.0


def _without_ext_proc(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "envoy.filters.http.ext_proc"]
    return cfg


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
    """The most admitted requests of provider being answered at once (from the mock's records)."""
    ev = []
    for r in records:
        if r["provider"] == provider and r["status"] == 200:
            ev += [(r["t"], 1), (r["end"], -1)]
    ev.sort(key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def reconcile_run(workdir: Path, reserve_only: bool) -> dict:
    name = "reconcile-reserve-only" if reserve_only else "reconcile"
    # Without the response path no lease is ever released: the cap would stop everything after
    # CAP requests until lease_ttl, which measures the leak, not reservation. Reserve-only runs
    # without it.
    concurrency = "" if reserve_only else f"    max_concurrent: {CAP}\n    lease_ttl: 60s"
    rules = f"""  - name: openai-per-model
    match: {{provider: openai}}
    per: [model]
    tokens: {{limit: {int(LIMIT * sc.MARGIN)}, period: {int(PERIOD)}s}}
{concurrency}
    provider_feedback: true
  - name: anthropic-per-model
    match: {{provider: anthropic}}
    per: [model]
    tokens: {{limit: {int(LIMIT * sc.MARGIN)}, period: {int(PERIOD)}s}}
    provider_feedback: true"""
    stack = _Stack(name, workdir / name, sc.limits_yaml(rules),
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
                "max_inflight": max_overlap(records, provider)}
        metrics = ""
        for i in range(3):
            metrics += h.http_get(f"http://127.0.0.1:{stack.ports[f'admin-{i}']}/metrics")[1].decode()
        settled = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                      if line.startswith("llm_ratelimit_reconciled_responses_total{") and 'result="usage"' in line)
        leases = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                     if line.startswith('llm_ratelimit_leases_released_total{result="ok"}'))
        out["settled_from_usage"], out["leases_released"] = settled, leases
        out["report"] = str(rpt.write_json(name, out))
        return out
    finally:
        stack.down()


@pytest.fixture(scope="module")
def runs():
    d = rpt.REPORT_DIR / "run"
    d.mkdir(parents=True, exist_ok=True)
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        on = pool.submit(reconcile_run, d, False)
        off = pool.submit(reconcile_run, d, True)
        return {"on": on.result(timeout=600), "off": off.result(timeout=600)}


def test_reconciliation_reaches_the_provider_limit_without_429(runs):
    on, off = runs["on"], runs["off"]
    assert on["client_totals"]["errors"] == 0, on["client_totals"]["error_samples"]
    for provider in ("openai", "anthropic"):
        p, q = on["providers"][provider], off["providers"][provider]
        assert p["provider_429"] == 0, (provider, p)
        assert p["streamed_ok"] > 0 and p["json_ok"] > 0, (provider, p)
        assert p["admitted_over_allowance"] >= 0.9, (provider, p, q)
        # Reserve-only leaves most of the budget idle: completions use 20% of max_tokens, so at
        # most (prompt + 40) / (prompt + 200) of what is reserved is used.
        assert q["admitted_over_allowance"] <= 0.6, (provider, q)
        assert q["provider_429"] == 0, (provider, q)
    assert on["settled_from_usage"] > 0 and off["settled_from_usage"] == 0, (on, off)


def test_inflight_cap_holds_across_three_replicas(runs):
    on = runs["on"]
    o = on["providers"]["openai"]
    # The clients offer 10 at once; the provider never sees more than the cap (its own view is
    # narrower than the lease, which runs from the check to the end of the response path).
    assert 3 <= o["max_inflight"] <= CAP, o
    assert on["leases_released"] > 0, on
