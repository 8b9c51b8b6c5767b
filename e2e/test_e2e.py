"""End to end through the real Envoy 1.40, redis-server, N ext-authz replicas, the mock provider and
the official OpenAI and Anthropic SDKs (Python and Go) in many processes. Run by e2e/run.sh
(make e2e, part of make test). The scenarios run concurrently (conftest.py); see scenarios.py."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import yaml

import harness as h
from conftest import result


def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([h.envoy_binary(), "--mode", "validate", "-c", str(path)],
                          capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------------------------
# The shipped configuration and its test variant


def test_shipped_envoy_yaml_validates():
    r = _validate(h.SHIPPED_ENVOY)
    assert r.returncode == 0 and "OK" in r.stdout + r.stderr, r.stdout + r.stderr
    cfg = h.load_shipped()
    authz = h.ext_authz_filter(cfg)
    body = authz["with_request_body"]
    listener = cfg["static_resources"]["listeners"][0]
    # The facts the design depends on (ENVOY-NOTES.md).
    assert body["pack_as_bytes"] is True and body["allow_partial_message"] is True
    assert body["max_request_bytes"] < listener["per_connection_buffer_limit_bytes"]
    assert body["max_request_bytes"] + 64 * 1024 < 8 * 1024 * 1024  # ext-authz -max-recv-bytes default
    assert authz["grpc_service"]["timeout"]
    assert "failure_mode_allow" in authz
    # The response path has a cluster of its own (its own round robin), the same as the checks'
    # but for its name and the service its health check asks for.
    clusters = {c["name"]: c for c in cfg["static_resources"]["clusters"]}
    checks = clusters[authz["grpc_service"]["envoy_grpc"]["cluster_name"]]
    responses = clusters[h.ext_proc_filter(cfg)["grpc_service"]["envoy_grpc"]["cluster_name"]]
    assert responses is not checks and responses["lb_policy"] == checks["lb_policy"] == "ROUND_ROBIN"
    assert checks["health_checks"][0]["grpc_health_check"]["service_name"] == "envoy.service.auth.v3.Authorization"
    assert responses["health_checks"][0]["grpc_health_check"]["service_name"] == "envoy.service.ext_proc.v3.ExternalProcessor"
    same = lambda c: json.loads(json.dumps(c).replace(f'"{c["name"]}"', '"_"').replace(  # noqa: E731
        c["health_checks"][0]["grpc_health_check"]["service_name"], "_"))
    assert same(checks) == same(responses), h.changed_paths(same(checks), same(responses))
    for c in cfg["static_resources"]["clusters"]:
        if "transport_socket" in c:
            tls = c["transport_socket"]["typed_config"]
            host = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["address"]
            sans = [m["matcher"]["exact"] for m in tls["common_tls_context"]["validation_context"]["match_typed_subject_alt_names"]]
            assert tls["sni"] == host and sans == [host], c["name"]


ALLOWED_CHANGES = [
    r"^\.admin\.address\.socket_address\.(address|port_value)$",
    r"^\.static_resources\.listeners\[egress\]\.address\.socket_address\.(address|port_value)$",
    r"^\.static_resources\.clusters\[\w+\]\.(type|dns_lookup_family|load_assignment\.endpoints.*|transport_socket)$",
    r"^\.static_resources\.clusters\[\w+\]\.typed_extension_protocol_options\.envoy\.extensions\.upstreams\.http\.v3\.HttpProtocolOptions\.(auto_config|explicit_http_config)$",
]


def test_test_variant_changes_only_addresses():
    shipped = h.load_shipped()
    derived = h.derive_envoy_config(shipped, listen_port=10000, admin_port=9901,
                                    upstream=("127.0.0.1", 8080), authz=[("127.0.0.1", 9001), ("127.0.0.1", 9002)])
    changed = h.changed_paths(shipped, derived)
    assert changed, "the variant must differ from the shipped file"
    unexpected = [p for p in changed if not any(re.match(a, p) for a in ALLOWED_CHANGES)]
    assert not unexpected, f"the test variant changes more than addresses: {unexpected}"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(derived, f)
        f.flush()
        r = _validate(Path(f.name))
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_stack_matches_envoy_yaml_and_dockerfile():
    base = yaml.safe_load((h.ROOT / "docker-compose.yaml").read_text())
    over = yaml.safe_load((h.ROOT / "docker-compose.override.yaml").read_text())
    dockerfile = (h.ROOT / "Dockerfile").read_text()
    cfg = h.load_shipped()
    svc = base["services"]
    # Envoy runs the shipped file, unchanged, from the official image.
    envoy = svc["envoy"]
    assert envoy["image"].startswith("envoyproxy/envoy:v1.40")
    conf_path = envoy["command"][envoy["command"].index("-c") + 1]
    assert f"./envoy/envoy.yaml:{conf_path}:ro" in envoy["volumes"]
    # The ext-authz cluster resolves the compose service, on the port the service listens on.
    authz_cluster = next(c for c in cfg["static_resources"]["clusters"]
                         if c["name"] == h.ext_authz_filter(cfg)["grpc_service"]["envoy_grpc"]["cluster_name"])
    sa = authz_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert authz_cluster["type"] == "STRICT_DNS" and sa["address"] in svc
    authz = svc[sa["address"]]
    assert authz["environment"]["GRPC_ADDR"] == f":{sa['port_value']}"
    assert authz["deploy"]["replicas"] >= 2
    assert authz["environment"]["REDIS_URL"].startswith("redis://redis:")
    # Built by the multi-stage Dockerfile into a non-root image.
    for target in (authz["build"]["target"], over["services"]["mockprovider"]["build"]["target"]):
        assert re.search(rf"^FROM .* AS {re.escape(target)}$", dockerfile, re.M), target
    assert "USER nonroot:nonroot" in dockerfile and "distroless/static" in dockerfile
    # Its limits file is valid for the binary that will read it.
    limits = next(v.split(":")[0] for v in authz["volumes"] if v.endswith(":/etc/llm-ratelimit/limits.yaml:ro"))
    r = subprocess.run([str(h.BIN / "ext-authz"), "check-config", str(h.ROOT / limits)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # Offline: the mock answers for every TLS upstream, and Envoy trusts the mock's CA at the path
    # envoy.yaml names.
    mock = over["services"]["mockprovider"]
    aliases = mock["networks"]["default"]["aliases"]
    trusted = set()
    for c in cfg["static_resources"]["clusters"]:
        if "transport_socket" in c:
            tls = c["transport_socket"]["typed_config"]
            assert tls["sni"] in aliases, tls["sni"]
            trusted.add(tls["common_tls_context"]["validation_context"]["trusted_ca"]["filename"])
    assert len(trusted) == 1
    bundle = Path(trusted.pop())
    ca_out = next(a.split("=", 1)[1] for a in mock["command"] if a.startswith("-tls-ca-out="))
    trust_volume = next(v for v in mock["volumes"] if v.endswith(":" + str(Path(ca_out).parent)))
    assert Path(ca_out).name == bundle.name
    assert f"{trust_volume.split(':')[0]}:{bundle.parent}:ro,nocopy" in over["services"]["envoy"]["volumes"]
    # Every flag the compose files pass to the mock exists.
    help_text = subprocess.run([str(h.BIN / "mockprovider"), "-h"], capture_output=True, text=True).stderr
    for a in mock["command"]:
        assert f"  -{a.split('=')[0].lstrip('-')}" in help_text, a


# ---------------------------------------------------------------------------------------------
# 1. The seed's stress test


def _check_seed(res: dict) -> None:
    t = res["client_totals"]
    assert res["duration_s"] >= 60
    assert res["python_processes"] >= 3
    providers = {(s["kind"], s["provider"]) for s in res["clients"]}
    assert {("python", "openai"), ("go", "openai"), ("go", "anthropic")} <= providers
    # Every call ended in success (through the SDK's retries) or a clean rate-limit error.
    assert t["errors"] == 0 and t["too_large"] == 0, t["error_samples"]
    assert all(s["ok"] > 0 for s in res["clients"]), [(s["client"], s["ok"]) for s in res["clients"]]
    assert t["streamed"] > 0 and t["stream_usage"] == t["streamed"]
    for name, p in res["providers"].items():
        ctx = f"{name}: {p}"
        # Every call was checked: none let through unpriced by Envoy's failure_mode_allow.
        assert p["failed_open"] == 0, ctx
        assert p["provider_429"] == 0, ctx
        assert p["violations"] == [], ctx
        assert p["demand_over_limit"] >= 3, ctx
        assert p["admitted_over_allowance"] <= 1.0, ctx
    openai = res["providers"]["openai"]
    anthropic = res["providers"]["anthropic"]
    if res["mock_mode"] == "token_bucket":
        # A full bucket plus its refill, while the clients were still starting calls (the
        # ramp-down after is not demand).
        assert openai["saturated"]["admitted_over_allowance"] >= 0.95, openai
        # Anthropic has no public tokenizer: the limiter over-prices its prompts on purpose (see
        # internal/tokens), so its utilisation is measured in the limiter's own tokens; the
        # provider must still never refuse (above).
        assert anthropic["saturated"]["limiter_admitted_over_allowance"] >= 0.95, anthropic
    else:
        # The limit in any 60 s: the busiest 60 s came within 5% of it (and never above, above).
        assert openai["busiest_60s"]["over_limit"] >= 0.95, openai
        # Anthropic in the limiter's own tokens, as above.
        assert anthropic["busiest_60s"]["limiter_over_limiter_limit"] >= 0.95, anthropic
    # Exact agreement of the two independent counters on OpenAI text.
    assert openai["pricing"]["joined"] > 0 and openai["pricing"]["exact"] == openai["pricing"]["joined"], openai["pricing"]
    # and never under-prices an Anthropic prompt.
    assert anthropic["pricing"]["limiter_minus_provider_min"] >= 0, anthropic["pricing"]


def test_seed_stress_token_bucket():
    _check_seed(result("seed-token_bucket"))


def test_seed_stress_sliding_window():
    _check_seed(result("seed-sliding_window"))


# ---------------------------------------------------------------------------------------------
# 2. Control


def test_control_without_the_limiter_the_provider_refuses():
    res = result("control")
    assert res["limiter_decisions"] == 0, "ext_authz must really be off on the route"
    assert res["provider_429"] >= 5, res


# ---------------------------------------------------------------------------------------------
# 3. Tenants


def test_tenant_flood_does_not_eat_another_tenants_budget():
    res = result("tenants")
    assert res["provider_429"] == 0, res
    quiet, flood = res["quiet"], res["flood"]
    assert quiet["calls"] >= 5 and quiet["ok"] == quiet["calls"], quiet
    assert quiet["denials"] == 0, quiet
    assert flood["denials"] > 0, flood
    assert flood["violations"] == [], flood
    assert flood["admitted_tokens"] >= 0.9 * flood["allowance"], flood


# ---------------------------------------------------------------------------------------------
# 4. Priority


def test_background_traffic_yields_to_interactive():
    res = result("priority")
    assert res["provider_429"] == 0, res
    inter, batch = res["interactive"], res["batch"]
    assert inter["calls"] >= 5 and inter["ok"] == inter["calls"], inter
    assert inter["denials"] == 0, inter
    assert batch["denials"] > 0 and batch["admitted_tokens"] > 0, batch


# ---------------------------------------------------------------------------------------------
# 5. Envoy edge cases


def test_edge_read_only_route_is_not_priced():
    m = result("edges")["models"]
    # No decision: every field of the access log's ratelimit object is empty.
    assert m["status"] == 200 and m["decision"] is None, m
    assert isinstance(m["ratelimit"], dict) and set(m["ratelimit"].values()) == {None}, m


def test_edge_body_over_max_request_bytes_priced_at_its_bound():
    p = result("edges")["partial_body"]
    assert p["status"] == 200 and p["request_bytes"] > 1_048_576, p
    assert p["decision"] == "allowed" and p["exact"] is False and p["estimate_reason"] == "partial_body", p
    # Priced at the upper bound, the model's context window: never below the provider's count.
    assert p["provider_prompt_tokens"] <= p["limiter_prompt_tokens"] == 128_000, p


def test_edge_non_utf8_body():
    n = result("edges")["non_utf8"]
    assert n["status"] == 200 and n["decision"] == "allowed" and n["prompt_tokens"] > 0, n
    assert n["failure_mode_allowed"] is None, n


def test_edge_streaming_passes_through():
    s = result("edges")["streaming"]
    assert s["chunks"] >= 8 and s["usage_prompt_tokens"], s
    # Not buffered by Envoy: the mock spreads 200 ms over the chunks.
    assert s["last_chunk_s"] - s["first_chunk_s"] >= 0.1, s
    assert s["anthropic_last_s"] - s["anthropic_first_s"] >= 0.1, s
    assert s["anthropic_events"][0] == "message_start" and s["anthropic_events"][-1] == "message_stop", s
    assert s["decisions"] == ["allowed", "allowed"], s


def test_edge_route_context_extensions_take_effect():
    r = result("edges")["route_limit"]
    assert r["status"] == 200 and r["limit_header"] == "1000000" and r["rules"] == "route:openai-embeddings", r
    assert r["statuses"][-1] == 429 and "openai-embeddings" in r["message"], r
    # The route's bucket (1M tokens, refilled at 1M/min while the loop runs), not the file's 5M.
    assert 900_000 <= r["provider_admitted_embedding_tokens"] <= r["allowance"] < 1_500_000, r
    # The chat route keeps the file's rules.
    assert r["chat_after_status"] == 200 and r["chat_after_limit_header"] == "5000000", r


def test_edge_request_that_can_never_fit():
    t = result("edges")["too_large"]
    assert t["status"] == 413 and t["should_retry"] == "false" and t["attempts"] == 1, t


def test_edge_replica_killed_envoy_fails_over():
    k = result("edges")["replica_killed"]
    c = k["client"]
    assert c["calls"] > 20 and c["errors"] == 0 and c["ok"] == c["calls"], c
    assert k["after_kill_allowed"] > 10, k
    assert k["failure_mode_allowed"] == 0, k
    assert k["healthy_replicas_after"] == 1, k


def test_edge_all_replicas_down_fail_open():
    d = result("edges")["all_down"]
    assert d["statuses"] == [200, 200, 200], d
    assert d["provider_saw_failure_mode_allowed"] == 3 and d["log_failure_mode_allowed"] == 3, d
