"""What a hostile client could not do, kept as regression tests through the real Envoy.

A hostile application controls its own headers and bodies, not Envoy's configuration. These are
the attacks that the shipped `envoy/envoy.yaml` with the limiter already holds; each test drives
the attack through the real Envoy (the shipped file, addresses swapped) and asserts on what the
mock provider admitted and on the limiter's decision in Envoy's access log, so that a change of
the shipped file or of the service that opens one of these again fails here.

- path tricks (`//`, `/./`, `/../`) are normalised before ext_authz prices and Envoy routes the
  request, and an escaped slash is rejected before anything sees it;
- duplicate JSON keys are read last-wins, as the providers' own parsers read them;
- a huge `n` is clamped to the provider's maximum and priced as that, never overflowed;
- a model name built to look like the reservation's encoding cannot forge or break what the
  response path settles;
- requests pipelined on one connection are each priced; request-smuggling framings get 400 from
  Envoy and never reach the provider.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request

import pytest

import harness as h
import report
import scenarios as sc

RUN_DIR = report.REPORT_DIR / "run"
MODEL = sc.OPENAI_MODEL
KEY = "sk-held"


@pytest.fixture(scope="module")
def stack():
    rules = """  - name: openai-per-model
    match: {provider: openai}
    per: [model]
    tokens: {limit: 5000000, period: minute}
    refund: true"""
    s = h.Stack("hostile-held", RUN_DIR / "hostile-held", sc.limits_yaml(rules),
                ["-mode", "token_bucket", "-openai-tpm", "100000000", "-latency", "20ms",
                 "-completion-tokens", "8", "-charge", "actual"], replicas=2)
    try:
        s.up()
        yield s
    finally:
        s.down()


def _raw(stack: h.Stack, data: bytes, until: bytes, count: int = 1, timeout: float = 10.0) -> bytes:
    """Sends data on one new TCP connection to Envoy and returns what it reads until `until` has
    been seen `count` times, Envoy closes the connection, or the timeout passes. (No half-close:
    Envoy takes a client's FIN as the end of the connection.)"""
    with socket.create_connection(("127.0.0.1", stack.ports["envoy"]), timeout=timeout) as c:
        c.sendall(data)
        out = b""
        deadline = time.time() + timeout
        while time.time() < deadline and out.count(until) < count:
            c.settimeout(max(0.05, deadline - time.time()))
            try:
                chunk = c.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        # The last answer's body: a little more time once its status line is in.
        c.settimeout(0.5)
        try:
            while chunk := c.recv(65536):
                out += chunk
        except (socket.timeout, OSError):
            pass
        return out


def _post(stack: h.Stack, path: str, body: bytes, headers: dict | None = None) -> tuple[int, bytes]:
    """One POST through Envoy as an HTTP-proxy client: absolute URL on api.openai.com."""
    req = urllib.request.Request("http://api.openai.com" + path, data=body, method="POST")
    req.add_header("content-type", "application/json")
    req.add_header("authorization", "Bearer " + KEY)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": stack.proxy}))
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _entries(stack: h.Stack, request_id: str | None = None, pred=None, want: int = 1, wait: float = 6.0) -> list[dict]:
    """Access-log entries (waiting for Envoy's flush) with this x-request-id or matching pred."""
    deadline = time.time() + wait
    while True:
        log = sc.access_log(stack)
        hits = [e for e in log if (request_id is None or e.get("request_id") == request_id) and (pred is None or pred(e))]
        if len(hits) >= want or time.time() > deadline:
            return hits
        time.sleep(0.2)


def _records(stack: h.Stack) -> list[dict]:
    return h.read_jsonl(stack.records_path)


def _chat(content: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


@pytest.mark.parametrize("path", ["/v1//chat/completions", "/v1/./chat/completions",
                                  "/v1/models/../chat/completions", "/v1/embeddings/../chat/completions"])
def test_path_tricks_are_normalised_and_priced(stack, path):
    rid = f"held-path-{abs(hash(path))}"
    code, _ = _post(stack, path, json.dumps(_chat("Hello there", max_tokens=30)).encode(), {"x-request-id": rid})
    assert code == 200
    (e,) = _entries(stack, rid)
    # The limiter saw the canonical chat path: priced exactly as a chat completion, not as an
    # unknown API (raw body) nor skipped as the unpriced /v1/models route.
    assert sc.meta(e, "decision") == "allowed", e
    assert sc.meta(e, "api") == "chat_completions", e
    assert sc.meta(e, "exact") is True, e
    rec = {r.get("request_id"): r for r in _records(stack)}[rid]
    assert rec["api"] == "chat_completions"
    assert sc.meta(e, "prompt_tokens") == rec["prompt"]


def test_escaped_slash_is_rejected_before_pricing(stack):
    before = len(_records(stack))
    rid = "held-escaped-slash"
    code, _ = _post(stack, "/v1/chat%2Fcompletions", json.dumps(_chat("Hi", max_tokens=5)).encode(), {"x-request-id": rid})
    assert code == 400
    time.sleep(0.5)
    assert len(_records(stack)) == before, "a request with an escaped slash reached the provider"


def test_duplicate_keys_are_read_last_wins(stack):
    # Python's json (the providers' servers) and Go's encoding/json (the mock) keep the last
    # duplicate: the cheap first max_tokens must not be what the limiter reserves.
    body = ('{"model": "%s", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}],'
            ' "max_tokens": 3000}' % MODEL).encode()
    rid = "held-duplicate-keys"
    code, _ = _post(stack, "/v1/chat/completions", body, {"x-request-id": rid})
    assert code == 200
    (e,) = _entries(stack, rid)
    rec = {r.get("request_id"): r for r in _records(stack)}[rid]
    assert rec["output"] == 3000, rec
    assert sc.meta(e, "output_tokens") == 3000, e


def test_huge_n_is_clamped_not_overflowed(stack):
    rid = "held-huge-n"
    code, body = _post(stack, "/v1/chat/completions",
                       json.dumps(_chat("Hi", max_tokens=10, n=10**15)).encode(), {"x-request-id": rid})
    (e,) = _entries(stack, rid)
    # n is at most 128 on OpenAI's API: the reservation is 128 completions, a finite positive
    # price (an overflow would wrap negative or saturate a bucket).
    out = sc.meta(e, "output_tokens")
    assert out == 128 * 10, e
    assert sc.meta(e, "cost") > 0
    assert sc.meta(e, "decision") in ("allowed", "too_large"), e
    # The service is still deciding.
    code, _ = _post(stack, "/v1/chat/completions", json.dumps(_chat("Hi", max_tokens=5)).encode())
    assert code == 200


def test_model_name_cannot_forge_the_reservation(stack):
    # Names built from the reservation encoding's own alphabet (space-separated words, '%'
    # escapes, bucket kinds and a negative cost): the response path must settle the real
    # reservation, never fail to read it, never apply a forged bucket.
    forged = [f"{MODEL} t t 1 60000 0 -9999999 openai-per-model",
              f"{MODEL}%20t%20t%201%2060000%200%20-9999999%20x",
              "r1 openai - 0 0 x t t 1 60000 0 -5000000 openai-per-model",
              f"{MODEL}\n r1"]
    malformed0 = stack.metric("llm_ratelimit_reconcile_errors_total", 'reason="reservation_malformed"')
    usage0 = stack.metric("llm_ratelimit_reconciled_responses_total", 'provider="openai",result="usage"')
    done = 0
    for i, model in enumerate(forged):
        code, _ = _post(stack, "/v1/chat/completions",
                        json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20}).encode(),
                        {"x-request-id": f"held-forge-{i}"})
        assert code == 200
        done += 1
    # Every settlement read its reservation and settled from the usage.
    h.wait_until(lambda: stack.metric("llm_ratelimit_reconciled_responses_total",
                                 'provider="openai",result="usage"') >= usage0 + done, 10, "settlements")
    assert stack.metric("llm_ratelimit_reconcile_errors_total", 'reason="reservation_malformed"') == malformed0
    # No bucket was credited beyond its capacity by a forged negative cost: the real per-model
    # bucket of the real model is untouched by these requests, and every key the store holds
    # belongs to this stack's prefix.
    keys = subprocess.run(["redis-cli", "-p", str(stack.ports["redis"]), "--scan"], capture_output=True,
                            text=True, timeout=5).stdout.split()
    assert keys and all(k.startswith("e2e-hostile-held:") for k in keys), keys


def _request(path: str, body: bytes, rid: str, extra: str = "") -> bytes:
    return (f"POST http://api.openai.com{path} HTTP/1.1\r\nHost: api.openai.com\r\n"
            f"Content-Type: application/json\r\nAuthorization: Bearer {KEY}\r\nx-request-id: {rid}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def test_pipelined_requests_are_each_priced(stack):
    bodies = [json.dumps(_chat(f"Pipelined request number {i}", max_tokens=11 + i)).encode() for i in range(3)]
    data = b"".join(_request("/v1/chat/completions", b, f"held-pipe-{i}") for i, b in enumerate(bodies))
    out = _raw(stack, data, b"HTTP/1.1 200", 3)
    assert out.count(b"HTTP/1.1 200") == 3, out[:400]
    for i in range(3):
        (e,) = _entries(stack, f"held-pipe-{i}")
        assert sc.meta(e, "decision") == "allowed", e
        assert sc.meta(e, "output_tokens") == 11 + i, e


@pytest.mark.parametrize("name,head", [
    ("cl-and-te", "Transfer-Encoding: chunked\r\n"),
    ("two-lengths", "Content-Length: 3\r\n"),
    ("te-obfuscated", "Transfer-Encoding: xchunked\r\n"),
])
def test_smuggling_framings_get_400(stack, name, head):
    # A second request hidden in the first one's body, framed so that a proxy and a server that
    # disagree on the framing would see two requests, the hidden one unpriced.
    hidden = _request("/v1/chat/completions", json.dumps(_chat("smuggled", max_tokens=900)).encode(), f"held-smuggled-{name}")
    outer = json.dumps(_chat("outer", max_tokens=5)).encode()
    body = b"0\r\n\r\n" + hidden if "chunked" in head else outer + hidden
    data = (f"POST http://api.openai.com/v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n"
            f"Content-Type: application/json\r\nx-request-id: held-outer-{name}\r\n"
            f"Content-Length: {len(body)}\r\n{head}\r\n").encode() + body
    before = {r.get("request_id") for r in _records(stack)}
    out = _raw(stack, data, b"HTTP/1.1 ")
    assert out.startswith(b"HTTP/1.1 400"), out[:200]
    time.sleep(0.5)
    new = {r.get("request_id") for r in _records(stack)} - before
    assert f"held-smuggled-{name}" not in new and f"held-outer-{name}" not in new, new
