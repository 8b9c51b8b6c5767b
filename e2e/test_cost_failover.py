"""Money budgets across three replicas and a Redis failover: the real Envoy, three ext-authz
replicas on a master and a replica managed by three real Sentinels (redis-server --sentinel), the
official `openai` and `anthropic` SDKs in several OS processes, and the mock provider's bill
(e2e/mockprovider/ledger.go, from its own cited price list).

Every worker of every process calls at the same instants (a burst every BURST_S seconds) with
the same request, so each answered request costs the same and reserves the same: the sums below
are counts times two constants, exact to the micro-dollar. A budget per provider (gpt-4o-mini,
claude-haiku-4-5) is far below the demand: the first burst fits and settles on the master; the
second fits and is in flight when the master is stopped (writes paused until the replica applied
every write the master acknowledged, then SIGKILL: harness.Stack.fail_over) and the Sentinels promote
the replica. The mock answers in LATENCY_S, longer than the failover, so the second burst's
reservations, taken on the old master, are settled on the new one. From the third burst one more
process per provider joins; the new master refuses what the budget cannot hold (429
insufficient_quota, which the SDKs do not retry) until the fifth burst is refused whole.

What it proves, per budget (c: what one request costs, r: what it reserves, F: settlements the
store could not apply, which keep their reservation by design; F is 0 unless an answer arrives
while no master answers, that is unless the failover outlasts LATENCY_S):

- the bill never exceeds the budget, and is within r + F x (r - c) of it once one more request
  is refused;
- the budget (read from the new master) holds exactly the bill plus F x (r - c): no reservation
  lost across the failover (r less each), no refund applied twice (r - c less each);
- the replicas' llm_ratelimit_spend_settled_micros_total equals the bill less F x c (the bill
  when F is 0), and F is what they counted as failed adjustments.

A crash that kills the master before the replica has its last writes can lose them: that bound is
in docs/operations.md (money budgets across a Redis failover), not proven here.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import sys
import threading
import time

import anthropic
import openai
import pytest

import clientnet
import harness as h
import report as rpt
import scenarios as sc

TENANT = "127.0.0.1"  # the shipped envoy.yaml names the tenant by the client's address
BURST_S = 8.0  # every worker starts a call at each multiple of this many seconds
LATENCY_S = 6.0  # the mock's answer time: longer than a failover (about 3 s here), shorter than a burst
BURSTS = 5
MAX_TOKENS = 24  # reserved; the mock generates 16, so each settlement refunds
PROMPT = ("Summarise in one sentence why a shared budget must be charged once per request, even when the "
          "store that keeps it fails over to its replica in the middle of the request.")

# provider -> the budget's rule, model and limit (micro-USD), its SDK processes x threads from the
# first burst, the threads of one more process that joins from the third (after the failover), and
# their API keys' prefix. Each request reserves r and costs c (gpt-4o-mini: 21 and 17;
# claude-haiku-4-5, whose prompt the limiter over-estimates at the 1-hour cache-write price: 284
# and 134): the first two bursts fit the limit, the third cannot, and the budget has less than r
# left after the fourth, so the fifth is refused whole.
BUDGETS = {
    "openai": {"rule": "mini-budget", "model": "gpt-4o-mini", "limit": 900, "procs": 2, "threads": 8,
               "late_threads": 12, "key": "sk-failover-openai-"},
    "anthropic": {"rule": "haiku-budget", "model": "claude-haiku-4-5", "limit": 1_700, "procs": 1, "threads": 4,
                  "late_threads": 4, "key": "sk-failover-anthropic-"},
}

RULES = "\n".join(f"""  - name: {b['rule']}
    match: {{provider: {p}, model: "{b['model']}*"}}
    per: [tenant]
    cost: {{limit: {b['limit'] / 1e6}, currency: USD, period: month, timezone: Europe/Paris}}""" for p, b in BUDGETS.items())


def _inflight(stack: h.Stack) -> int:
    return stack.mock_stats()["inflight"]


def _answered(stack: h.Stack) -> int:
    return sum(p["admitted"] for p in stack.mock_stats()["providers"].values())


def _refused(stack: h.Stack, provider: str) -> dict:
    """One more of the load's requests, through the SDK: the error it raises."""
    b = BUDGETS[provider]
    msgs = [{"role": "user", "content": PROMPT}]
    try:
        if provider == "openai":
            c = openai.OpenAI(api_key=b["key"] + "sdk", base_url="http://api.openai.com/v1", max_retries=2, timeout=30.0,
                              http_client=openai.DefaultHttpx2Client(transport=clientnet.transport(stack.proxy, None)))
            c.chat.completions.create(model=b["model"], max_tokens=MAX_TOKENS, messages=msgs)
        else:
            c = anthropic.Anthropic(api_key=b["key"] + "sdk", base_url="http://api.anthropic.com", max_retries=2,
                                    timeout=30.0, http_client=anthropic.DefaultHttpxClient(
                                        proxy=stack.proxy, trust_env=False, verify=False))
            c.messages.create(model=b["model"], max_tokens=MAX_TOKENS, messages=msgs)
    except (openai.RateLimitError, anthropic.RateLimitError) as e:
        return {"raised": type(e).__name__, "code": getattr(e, "code", None), "message": e.message}
    return {"raised": None}


def _load(stack: h.Stack, stack_done: threading.Event, stack_up: threading.Event, procs: list) -> list[dict]:
    """Runs the SDK processes (e2e/loadgen.py, added to procs as they start) and returns their
    summaries. They start while the stack starts (on Envoy's port, chosen in advance) and say
    when their client is built; once all have and the stack is up (stack_done set, and stack_up
    with it), the first burst is set at the next multiple of BURST_S at least a second later, so that no process
    misses it however long the SDKs took to import."""
    stack.dir.mkdir(parents=True, exist_ok=True)
    prompts = stack.dir / "prompts.json"
    prompts.write_text(json.dumps({"prompts": [{"user": PROMPT}]}))
    go = stack.dir / "failover-start"
    for p, b in BUDGETS.items():
        for i in range(b["procs"] + 1):
            late = i == b["procs"]
            name = f"failover-{p}-{i}"
            argv = [sys.executable, str(h.E2E / "loadgen.py"), "--proxy", stack.proxy, "--name", name,
                    "--out", str(stack.dir / f"{name}.json"), "--ready", str(stack.dir / f"{name}.ready"),
                    "--start-file", str(go), "--provider", p, "--model", b["model"], "--key", f"{b['key']}{i}",
                    "--prompts", str(prompts), "--max-tokens", str(MAX_TOKENS), "--stream-every", "0",
                    "--burst-every", str(BURST_S),
                    # Half a second before the first burst (the late process: the third), until the
                    # last one has started.
                    "--threads", str(b["late_threads"] if late else b["threads"]),
                    "--start-offset", str(2 * BURST_S if late else 0.0),
                    "--duration", str(BURST_S * (BURSTS - (3 if late else 1)) + 1.0)]
            procs.append((name, h.start(name, argv, stack.dir)))
    for name, proc in procs:
        h.wait_until(lambda name=name: (stack.dir / f"{name}.ready").exists(), 90, "the SDK clients", proc)
    if not stack_done.wait(120) or not stack_up.is_set():
        raise RuntimeError("the stack did not start")
    first = (time.time() + 1.0) // BURST_S * BURST_S + BURST_S
    tmp = go.with_suffix(".tmp")
    tmp.write_text(f"{first - 0.5:.3f}")
    tmp.replace(go)
    summaries = []
    for name, proc in procs:
        proc.p.wait(timeout=BURST_S * BURSTS + 60)
        if proc.p.returncode != 0:
            raise RuntimeError(f"{name} failed ({proc.p.returncode}):\n{proc.tail()}")
        summaries.append(json.loads((stack.dir / f"{name}.json").read_text()))
    return summaries


@pytest.fixture(scope="module")
def failover(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cost-failover") / "cost-failover"
    stack = h.Stack("cost-failover", workdir, sc.limits_yaml(RULES, tenant="{source: header, header: x-tenant-id}"),
                    ["-openai-tpm", "0", "-anthropic-itpm", "100000000", "-anthropic-otpm", "100000000",
                     "-latency", f"{LATENCY_S}s", "-completion-tokens", "16"],
                    replicas=3, sentinels=3, replica_args=["-decision-log", str(workdir / "decisions-{i}.log")])
    out: dict = {"burst_s": BURST_S, "latency_s": LATENCY_S, "bursts": BURSTS, "max_tokens": MAX_TOKENS}
    pool = cf.ThreadPoolExecutor(max_workers=1)
    stack.ports["envoy"] = h.free_port()
    stack_done, stack_up, clients = threading.Event(), threading.Event(), []
    load = pool.submit(_load, stack, stack_done, stack_up, clients)
    try:
        stack.up()
        stack_up.set()
        stack_done.set()
        threads = sum(b["procs"] * b["threads"] for b in BUDGETS.values())
        try:
            h.wait_until(lambda: (stack.dir / "failover-start").exists() or load.done(), 90, "the SDK clients")
            # The first burst answered (settled on the master), the second one admitted and
            # waiting for its answers: stop the master now.
            h.wait_until(lambda: load.done() or (_answered(stack) >= threads and _inflight(stack) == threads),
                         3 * BURST_S + 5, "the second burst in flight")
            if load.done():
                load.result()  # the clients' failure
                raise RuntimeError("the clients ended before the second burst")
            t = stack.fail_over()
            out["failover"] = {"paused_to_killed_s": round(t["killed"] - t["paused"], 3),
                               "killed_to_promoted_s": round(t["promoted"] - t["killed"], 3),
                               "replication_offset": t["offsets"][0],
                               "replica_behind_at_pause_bytes": t["behind_at_pause"],
                               "in_flight_after_promotion": _inflight(stack)}
            summaries = load.result(timeout=BURST_S * BURSTS + 120)
        finally:
            # Clients still running here are a failure's: they stop now.
            for _, proc in list(clients):
                proc.kill()
        # Every answer settled (or failed to): the response path followed as many reserved
        # requests as the mock answered.
        answered = _answered(stack)
        h.wait_until(lambda: stack.metric("llm_ratelimit_reconciled_responses_total")
                     - stack.metric("llm_ratelimit_reconciled_responses_total", 'result="no_reservation"') >= answered,
                     30, "every answer settled")
        out["refusal"] = {p: _refused(stack, p) for p in BUDGETS}
        ledger = json.loads(h.http_get(stack.mock_url + "/ledger")[1])
        records = h.read_jsonl(stack.records_path)
        for p, b in BUDGETS.items():
            mine = [r for r in records if r.get("key", "").startswith(b["key"]) and r["status"] == 200]
            out[p] = {
                "limit": b["limit"],
                "clients": sc.client_totals([s for s in summaries if s["provider"] == p]),
                "billed": sum(a["micros"] for k, a in ledger["keys"].items() if k.startswith(b["key"])),
                "answered": sum(a["requests"] for k, a in ledger["keys"].items() if k.startswith(b["key"])),
                # What every call would have cost: the demand on the budget.
                "demand": sum(s["calls"] for s in summaries if s["provider"] == p) * (mine[0]["micros"] if mine else 0),
                "costs": sorted({r["micros"] for r in mine}),
                "failure_mode_allowed": sum(1 for r in mine if r.get("failure_mode_allowed")),
                "spent": stack.spent(p, b["model"], TENANT, b["rule"]),
                "settled_metric": stack.metric("llm_ratelimit_spend_settled_micros_total", f'rule="{b["rule"]}"'),
                "reserved_metric": stack.metric("llm_ratelimit_spend_reserved_micros_total", f'rule="{b["rule"]}"'),
                "refusals_metric": stack.metric("llm_ratelimit_decisions_total", 'decision="spent"', f'provider="{p}"'),
            }
        out["adjust_failed_metric"] = stack.metric("llm_ratelimit_reconcile_errors_total", 'reason="reconcile_adjust_failed"')
        out["unavailable_metric"] = stack.metric("llm_ratelimit_decisions_total", 'decision="unavailable"')
    finally:
        stack_done.set()
        for _, proc in list(clients):
            proc.kill()
        pool.shutdown(wait=True)
        stack.down()
    # The decision logs, complete once the replicas stopped: which reservations were taken and
    # which settlements the store applied, with the store's times.
    logs = [r for i in range(stack.replicas) for r in h.read_jsonl(workdir / f"decisions-{i}.log")]
    for p in BUDGETS:
        taken = {r["rid"]: sc.iso_time(r["ts"]) for r in logs
                 if r["ev"] == "decision" and r["provider"] == p and r.get("rid") and r["outcome"] == "allowed"}
        applied = {r["rid"]: sc.iso_time(r["ts"]) for r in logs if r["ev"] == "settlement" and r.get("rid") in taken}
        out[p]["reserved"] = len(taken)
        out[p]["settlements_applied"] = len(applied)
        out[p]["taken_on_old_settled_on_new"] = sum(1 for rid, ts in applied.items()
                                                   if taken[rid] < t["paused"] and ts > t["killed"])
    rpt.REPORT_DIR.mkdir(parents=True, exist_ok=True)
    (rpt.REPORT_DIR / "cost_failover.json").write_text(json.dumps(out, indent=1))
    return out


def _constants(m: dict) -> tuple[int, int, int]:
    """c (what each request cost), r (what each reserved) and F (settlements the store did not
    apply) of one budget's figures."""
    (c,) = m["costs"]
    r = int(m["reserved_metric"]) // m["reserved"]
    return c, r, m["answered"] - m["settlements_applied"]


@pytest.mark.parametrize("provider", list(BUDGETS))
def test_the_bill_stays_within_the_budget_and_spends_it(failover, provider):
    m = failover[provider]
    c, r, f = _constants(m)
    # Identical requests: one cost, one reservation, each the mock answered reserved once.
    assert len(m["costs"]) == 1 and m["reserved_metric"] == m["reserved"] * r and r > c, m
    assert m["answered"] == m["reserved"], m
    # Far above the budget (the calls would have cost twice it): refusals, no call failed, none
    # let through unchecked.
    cl = m["clients"]
    assert m["demand"] >= 2 * m["limit"], m
    assert cl["errors"] == 0 and cl["rate_limited"] > 0, cl
    assert m["refusals_metric"] >= cl["rate_limited"] and m["failure_mode_allowed"] == 0, m
    assert m["billed"] == m["answered"] * c, m
    assert m["billed"] <= m["limit"], m
    # One more request is refused (below), so less than r is left; the settlements that failed
    # keep r - c each beyond the bill.
    assert m["billed"] > m["limit"] - r - f * (r - c), m


@pytest.mark.parametrize("provider", list(BUDGETS))
def test_no_charge_lost_and_no_refund_twice_across_the_failover(failover, provider):
    m = failover[provider]
    c, r, f = _constants(m)
    # Reservations taken on the old master and settled on the new one.
    assert m["taken_on_old_settled_on_new"] > 0, m
    # The new master holds each answer at its cost, and each failed settlement at its
    # reservation: a reservation lost with the old master would hold r less, a refund applied
    # twice r - c less.
    assert m["spent"] == m["billed"] + f * (r - c), (m, c, r, f)
    # The replicas' settled spend is the bill, less what the failed settlements cost.
    assert m["settled_metric"] == m["billed"] - f * c, (m, c, r, f)


def test_failed_settlements_are_the_ones_counted(failover):
    f = sum(_constants(failover[p])[2] for p in BUDGETS)
    assert failover["adjust_failed_metric"] == f, failover


def test_the_sdks_meet_the_spent_budget(failover):
    o, a = failover["refusal"]["openai"], failover["refusal"]["anthropic"]
    assert o["raised"] == "RateLimitError" and o["code"] == "insufficient_quota", o
    assert "Budget mini-budget is spent" in o["message"], o
    assert a["raised"] == "RateLimitError" and "Budget haiku-budget is spent" in a["message"], a
