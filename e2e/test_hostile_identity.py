"""Hostile clients against identity and the access log, through the real Envoy running the shipped
envoy/envoy.yaml (addresses swapped only), two ext-authz replicas on one redis-server and the
mock provider. Each attack runs twice: on the shipped configuration, and on a control stack whose
Envoy lacks the defence (the early removal of x-envoy-* headers, the query-free path in the
access log), to show what the attack does without it, so that the test can fail.

Attacks: a forged x-envoy-auth-failure-mode-allowed (the access log's fail-open mark), a
credential in the query string, Envoy's own retry and timeout headers sent by the client.

Identity: the client's own x-tenant-id and x-llm-priority (invented tenants for fresh fair
shares, another tenant's name to drain its budget, two tenant headers, a better class). The
shipped envoy.yaml removes the client's copies and names the tenant by the connection's peer
address; each client here connects from an address of its own (127.0.0.41, 127.0.0.42). The
control is the envoy.yaml that passed the client's identity headers through."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path

import pytest

import clientnet
import harness as h
import scenarios as sc

SECRET = "sk-hostile-identity-query-secret"
RULES = """  - name: openai-per-model
    match: {provider: openai}
    per: [model]
    tokens: {limit: 200000, period: minute}"""


def _without_defences(cfg: dict) -> dict:
    """The control: no early removal of the client's x-envoy-* headers, the full path logged."""
    cfg = copy.deepcopy(cfg)
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm.pop("early_header_mutation_extensions", None)
    fmt = hcm["access_log"][0]["typed_config"]["log_format"]
    fmt.pop("formatters", None)
    fmt["json_format"]["path"] = "%REQ(:PATH)%"
    return cfg


def _identity_passed_through(cfg: dict) -> dict:
    """The identity control: the client's x-tenant-id and x-llm-priority reach ext_authz (the
    x-envoy-* removal stays)."""
    cfg = copy.deepcopy(cfg)
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    ext = hcm["early_header_mutation_extensions"][0]["typed_config"]
    ext["mutations"] = [m for m in ext["mutations"] if "remove_on_match" in m]
    assert len(ext["mutations"]) == 1, ext
    return cfg


_up_lock = threading.Lock()


class _Stack(h.Stack):
    defences: bool = True
    deviation = staticmethod(_without_defences)

    def up(self):
        with _up_lock:
            if self.defences:
                return super().up()
            orig = h.derive_envoy_config
            h.derive_envoy_config = lambda *a, **k: self.deviation(orig(*a, **k))
            try:
                return super().up()
            finally:
                h.derive_envoy_config = orig


def _attack(workdir: Path, defences: bool) -> dict:
    import httpx2

    name = "hostile-identity" + ("" if defences else "-control")
    stack = _Stack(name, workdir / name, sc.limits_yaml(RULES, tenant="{source: header, header: x-tenant-id, default: nobody}"),
                   ["-mode", "token_bucket", "-openai-tpm", "100000000", "-latency", "50ms", "-completion-tokens", "4"])
    stack.defences = defences
    out: dict = {}
    try:
        stack.up()
        c = httpx2.Client(proxy=stack.proxy, trust_env=False, timeout=30)
        body = {"model": sc.OPENAI_MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        ids = {}
        for tag, headers, query in [
            ("forged_fail_open", {"x-envoy-auth-failure-mode-allowed": "true"}, ""),
            ("query_secret", {}, f"?api-key={SECRET}"),
            # Envoy would retry a 5xx five times and time the request out after 1 ms.
            ("envoy_knobs", {"x-envoy-retry-on": "5xx,reset", "x-envoy-max-retries": "5",
                             "x-envoy-upstream-rq-timeout-ms": "1"}, ""),
        ]:
            rid = f"{name}-{tag}"
            r = c.post("http://api.openai.com/v1/chat/completions" + query, json=body,
                       headers={"authorization": "Bearer sk-hostile", "x-request-id": rid, **headers})
            ids[tag] = rid
            out[tag] = {"status": r.status_code}
        deadline = time.time() + 10
        while time.time() < deadline:
            log = {e.get("request_id"): e for e in sc.access_log(stack)}
            if all(i in log for i in ids.values()):
                break
            time.sleep(0.2)
        records = {}
        for rec in h.read_jsonl(stack.records_path):
            records.setdefault(rec.get("request_id"), []).append(rec)
        for tag, rid in ids.items():
            e = log.get(rid, {})
            out[tag].update(log_path=e.get("path"), log_failure_mode_allowed=e.get("failure_mode_allowed"),
                            decision=e.get("decision"), provider_attempts=len(records.get(rid, [])),
                            provider_failure_mode_allowed=[x.get("failure_mode_allowed") for x in records.get(rid, [])])
        out["access_log_text"] = stack.access_log_path.read_text(errors="replace")
        return out
    finally:
        stack.down()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    workdir = tmp_path_factory.mktemp("hostile-identity")
    return {"shipped": _attack(workdir, True), "control": _attack(workdir, False)}


def test_forged_fail_open_mark_is_stripped(runs):
    s, c = runs["shipped"]["forged_fail_open"], runs["control"]["forged_fail_open"]
    # Shipped: priced, and neither the log nor the provider sees the client's mark.
    assert s["status"] == 200 and s["decision"] == "allowed", s
    assert s["log_failure_mode_allowed"] is None and s["provider_failure_mode_allowed"] == [None], s
    # Control: the same request, priced, is logged (and forwarded) as if it had failed open.
    assert c["decision"] == "allowed" and c["log_failure_mode_allowed"] == "true", c


def test_query_string_credential_not_logged(runs):
    s, c = runs["shipped"], runs["control"]
    assert s["query_secret"]["log_path"] == "/v1/chat/completions", s["query_secret"]
    assert SECRET not in s["access_log_text"]
    assert SECRET in c["access_log_text"], "control: the full path is logged"


def test_client_envoy_retry_and_timeout_headers_ignored(runs):
    # Held: one attempt at the provider, answered (no 1 ms timeout), in both stacks (Envoy treats
    # these clients as external); the shipped file removes them whatever the internal addresses.
    for k in ("shipped", "control"):
        e = runs[k]["envoy_knobs"]
        assert e["status"] == 200 and e["provider_attempts"] == 1, (k, e)


# ---------------------------------------------------------------------------------------------
# Identity headers

HOSTILE, VICTIM = "127.0.0.41", "127.0.0.42"
# Each call costs a little over 1,000 tokens: two fit a share, also for the hostile address's
# batch class (which may not take the share's last 20%).
SHARE, MAX_TOKENS = 3000, 1000
INVENTED = 8
IDENTITY_RULES = f"""  - name: tenant-share
    match: {{provider: openai}}
    per: [tenant]
    tokens: {{limit: {SHARE}, period: minute}}"""
IDENTITY_TENANT = "{source: header, header: x-tenant-id, default: nobody}"
IDENTITY_PRIORITY = ("{header: x-llm-priority, default: interactive, classes: {interactive: {floor: 0}, batch: {floor: 0.2}}, "
                     f"tenants: [{{tenant: '{HOSTILE}', class: batch}}]}}")


def _identity(workdir: Path, defences: bool) -> dict:
    import httpx2

    name = "hostile-identity-headers" + ("" if defences else "-control")
    stack = _Stack(name, workdir / name, sc.limits_yaml(IDENTITY_RULES, tenant=IDENTITY_TENANT, priority=IDENTITY_PRIORITY),
                   ["-mode", "token_bucket", "-openai-tpm", "100000000", "-latency", "20ms", "-completion-tokens", "4"])
    stack.defences, stack.deviation = defences, _identity_passed_through
    out: dict = {}

    def client(source: str) -> "httpx2.Client":
        return httpx2.Client(transport=clientnet.transport(stack.proxy, source), timeout=30)

    body = {"model": sc.OPENAI_MODEL, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": "hi"}]}

    def call(c, rid: str, headers) -> int:
        return c.post("http://api.openai.com/v1/chat/completions", json=body,
                      headers=[("authorization", "Bearer sk-identity"), ("x-request-id", rid), *headers]).status_code

    try:
        stack.up()
        hostile, victim = client(HOSTILE), client(VICTIM)
        # A fresh tenant name on every call: a fresh fair share each, if the header counted.
        out["invented"] = [call(hostile, f"{name}-inv-{i}", [("x-tenant-id", f"invented-{i}")]) for i in range(INVENTED)]
        # The victim's name: its share drained, if the header counted; then the victim's own call.
        out["drain"] = [call(hostile, f"{name}-drain-{i}", [("x-tenant-id", VICTIM)]) for i in range(3)]
        # The victim names itself, as a well-behaved application did when the header counted.
        out["victim"] = call(victim, f"{name}-victim", [("x-tenant-id", VICTIM)])
        # Two tenant headers (Envoy joins them) and a better class than the tenant's.
        out["duplicate"] = call(hostile, f"{name}-dup", [("x-tenant-id", "a"), ("x-tenant-id", "b")])
        out["priority"] = call(hostile, f"{name}-prio", [("x-llm-priority", "interactive")])
        deadline = time.time() + 10
        while True:
            log = {e.get("request_id"): e for e in sc.access_log(stack) if str(e.get("request_id", "")).startswith(name)}
            if len(log) >= INVENTED + 6 or time.time() > deadline:
                break
            time.sleep(0.2)
        out["log"] = {rid.removeprefix(name + "-"): {"status": e.get("status"), "tenant": e.get("tenant"),
                                                     "priority": e.get("priority"), "decision": e.get("decision")}
                      for rid, e in log.items()}
        admitted = [r for r in h.read_jsonl(stack.records_path) if r.get("status") == 200]
        out["provider_admitted"] = len(admitted)
        out["provider_admitted_tokens"] = sum(r["cost"] for r in admitted)
        return out
    finally:
        stack.down()


@pytest.fixture(scope="module")
def identity(tmp_path_factory) -> dict:
    workdir = tmp_path_factory.mktemp("hostile-identity-headers")
    return {"shipped": _identity(workdir, True), "control": _identity(workdir, False)}


def test_invented_tenants_share_one_budget(identity):
    s, c = identity["shipped"], identity["control"]
    # Shipped: every call is the hostile address's, whatever it names: two fit its share.
    assert s["invented"].count(200) == 2 and s["invented"].count(429) == INVENTED - 2, s["invented"]
    assert {s["log"][f"inv-{i}"]["tenant"] for i in range(INVENTED)} == {sc.tenant_hash(HOSTILE)}, s["log"]
    # Control: a fresh share per invented name, every call admitted.
    assert c["invented"] == [200] * INVENTED, c["invented"]


def test_no_tenant_drains_another(identity):
    s, c = identity["shipped"], identity["control"]
    # Shipped: the drain is charged to the hostile address (already spent: refused); the victim
    # is answered from its own share.
    assert set(s["drain"]) == {429} and s["victim"] == 200, s
    assert s["log"]["victim"]["tenant"] == sc.tenant_hash(VICTIM), s["log"]["victim"]
    # Control: two of the drain's calls are charged to the victim, whose own call is then refused.
    assert c["drain"][:2] == [200, 200] and c["victim"] == 429, c


def test_duplicate_tenant_header_charges_the_client(identity):
    s, c = identity["shipped"], identity["control"]
    # Shipped: the client's copies are gone, the call is the hostile address's (refused: spent).
    assert s["log"]["dup"]["tenant"] == sc.tenant_hash(HOSTILE) and s["duplicate"] == 429, s["log"]["dup"]
    # Control: the joined value reaches the service, which refuses it rather than charge "a,b".
    assert c["duplicate"] == 400 and c["log"]["dup"]["decision"] == "bad_identity", c["log"]["dup"]


def test_priority_follows_the_tenant(identity):
    s, c = identity["shipped"], identity["control"]
    assert s["log"]["prio"]["priority"] == "batch", s["log"]["prio"]
    assert c["log"]["prio"]["priority"] == "interactive", c["log"]["prio"]


def test_identity_attacks_admit_no_more_than_the_shares(identity):
    s, c = identity["shipped"], identity["control"]
    # Two tenants with a share each: at most two calls each reach the provider.
    assert s["provider_admitted"] <= 4 and s["provider_admitted_tokens"] <= 2 * SHARE, s
    assert c["provider_admitted"] > 4, c
