"""Hostile clients against identity and the access log, through the real Envoy running the shipped
envoy/envoy.yaml (addresses swapped only), two ext-authz replicas on one redis-server and the
mock provider. Each attack runs twice: on the shipped configuration, and on a control stack whose
Envoy lacks the defence (the early removal of x-envoy-* headers, the query-free path in the
access log), to show what the attack does without it, so that the test can fail.

Attacks: a forged x-envoy-auth-failure-mode-allowed (the access log's fail-open mark), a
credential in the query string, Envoy's own retry and timeout headers sent by the client."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path

import pytest

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


_up_lock = threading.Lock()


class _Stack(h.Stack):
    defences: bool = True

    def up(self):
        with _up_lock:
            if self.defences:
                return super().up()
            orig = h.derive_envoy_config
            h.derive_envoy_config = lambda *a, **k: _without_defences(orig(*a, **k))
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
