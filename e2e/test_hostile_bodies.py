"""Hostile bodies through the real Envoy (the shipped envoy.yaml), two ext-authz replicas on one
Redis, the mock provider billing what it reads (-charge reserved: prompt + max_tokens, as OpenAI
describes its limit) and reading bodies as the providers' Python services do.

- Row 3: bodies the provider reads but the limiter's former parser did not (a 70-level tool
  schema, a UTF-8 BOM, UTF-16, NaN, a bogus content-encoding), each naming max_tokens 16000.
  The limiter used to reserve the 4096 default for them, and four of them passed a 40,000
  budget (64,000 counted by the provider). Now each is priced with its max_tokens: the ledger
  stays within the budget.
- Row 4: bodies over max_request_bytes (1 MiB), with content-length (the official SDK), chunked,
  and chunked pausing at exactly 1 MiB (reported complete by Envoy): priced at the upper bound,
  never below what the provider counted.
- Row 9: a Responses turn continuing a stored one (previous_response_id, the official SDK): the
  provider bills the earlier turns as input; the limiter reserves the configured unseen-context
  bound, never below what the provider counted.

Each case checks that the attack is real on the provider's side (what the former pricing
reserved is below what the provider counted) next to the defence (the limiter's price covers
it); run against the former ext-authz binary, the budget and price assertions fail.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

import harness as h
import scenarios as sc

BUDGET = 40_000  # tokens per minute of each gpt-4o-x-* model
MAX_TOKENS = 16_000
FORMER_DEFAULT = 4096  # the output the former pricing reserved for a body it could not read
UNSEEN = 30_000  # pricing.unseen_context_tokens

RULES = f"""  - name: small
    match: {{provider: openai, model: "gpt-4o-x-*"}}
    per: [model]
    tokens: {{limit: {BUDGET}, period: minute}}
  - name: large
    match: {{provider: openai}}
    per: [model]
    tokens: {{limit: 3000000, period: minute}}"""


def limits() -> str:
    text = sc.limits_yaml(RULES)
    return text.replace("pricing: {default_output_tokens: 4096}",
                        f"pricing: {{default_output_tokens: 4096, unseen_context_tokens: {UNSEEN}}}")


@pytest.fixture(scope="module")
def stack():
    workdir = sc.rpt.REPORT_DIR / "run" / "hostile-bodies"
    s = h.Stack("hostile-bodies", workdir, limits(),
                ["-mode", "token_bucket", "-openai-tpm", "100000000", "-anthropic-tpm", "100000000",
                 "-latency", "20ms", "-completion-tokens", "8", "-charge", "reserved"])
    try:
        s.up()
        yield s
    finally:
        s.down()


def records(stack) -> list[dict]:
    return h.read_jsonl(stack.records_path)


def await_entries(stack, pred, n: int, timeout: float = 10.0) -> list[dict]:
    """Envoy's access-log entries matching pred, once there are n of them (Envoy flushes every 250 ms)."""
    deadline = time.monotonic() + timeout
    while True:
        hits = [e for e in sc.access_log(stack) if pred(e)]
        if len(hits) >= n or time.monotonic() > deadline:
            return hits
        time.sleep(0.1)


def model_of(e: dict) -> str | None:
    return sc.meta(e, "model")


def cost_of(e: dict) -> float:
    return float(e.get("cost") or sc.meta(e, "cost") or 0)


def raw_client(stack):
    import httpx2

    return httpx2.Client(proxy=stack.proxy, trust_env=False, timeout=60)


def chat_body(model: str, extra: str = "", content: str = "Say hi.") -> str:
    return (f'{{"model":"{model}","messages":[{{"role":"user","content":{json.dumps(content)}}}]'
            f'{extra},"max_tokens":{MAX_TOKENS}}}')


def schema(depth: int) -> str:
    return ('[{"type":"function","function":{"name":"f","parameters":'
            + '{"type":"object","properties":{"x":' * depth + '{"type":"string"}' + "}}" * depth + "}}]")


# Row 3: the bodies, each on its own model (its own 40,000 budget), each naming max_tokens 16000.
ROW3 = {
    "deep": lambda m: (chat_body(m, ',"tools":' + schema(70)).encode(), {}),
    "bom": lambda m: (b"\xef\xbb\xbf" + chat_body(m).encode(), {}),
    "utf16": lambda m: (chat_body(m).encode("utf-16"), {}),
    "nan": lambda m: (chat_body(m, ',"temperature":NaN').encode(), {}),
    "encoding": lambda m: (chat_body(m).encode(), {"content-encoding": "bogus"}),
}
ATTEMPTS = 4


@pytest.mark.parametrize("kind", sorted(ROW3))
def test_unparseable_to_the_former_pricer_stays_within_budget(stack, kind):
    model = f"gpt-4o-x-{kind}"
    body, headers = ROW3[kind](model)
    client = raw_client(stack)
    statuses = []
    for i in range(ATTEMPTS):
        r = client.post("http://api.openai.com/v1/chat/completions", content=body,
                        headers={"content-type": "application/json", "authorization": f"Bearer sk-{kind}-{i}", **headers})
        statuses.append(r.status_code)
    entries = await_entries(stack, lambda e: model_of(e) == model, ATTEMPTS)
    assert len(entries) == ATTEMPTS, (statuses, entries)
    admitted = [r for r in records(stack) if r.get("model") == model and r["status"] == 200]
    assert admitted, (statuses, entries)
    # The attack is real: the provider reads the body and counts its max_tokens, far above what
    # the former pricing reserved for it.
    for r in admitted:
        assert r["output"] == MAX_TOKENS > FORMER_DEFAULT, r
    # No request passed unpriced, and each was priced at no less than the provider counted.
    by_id = {e.get("request_id"): e for e in entries}
    for r in admitted:
        e = by_id.get(r["request_id"], {})
        assert e.get("decision") == "allowed" and not e.get("failure_mode_allowed"), (r, e)
        assert cost_of(e) >= r["cost"], (r, e)
    # The ledger: no more than the budget (plus its refill while the attempts ran).
    span = max(r["t"] for r in admitted) - min(r["t"] for r in admitted)
    assert sum(r["cost"] for r in admitted) <= BUDGET + BUDGET / 60 * span, (statuses, admitted)
    assert 429 in statuses, statuses


# Row 4: bodies over max_request_bytes.

def big_content(prose: str) -> list[dict]:
    """About 90,000 tokens of prose and a 1.2 MB image: within gpt-4o's window, over 1 MiB."""
    words = (prose + "\n") * (400_000 // (len(prose.encode()) + 1) + 1)
    return [{"type": "text", "text": words},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 1_200_000}}]


def prose() -> str:
    return " ".join(p["user"] for p in h.prompts())


def check_bounded(stack, model: str, entry_pred) -> tuple[dict, dict]:
    entries = await_entries(stack, entry_pred, 1)
    assert entries, f"no access-log entry for {model}"
    e = entries[-1]
    recs = [r for r in records(stack) if r.get("request_id") == e.get("request_id")]
    assert recs, e
    r = recs[-1]
    assert r["status"] == 200 and e.get("decision") == "allowed" and not e.get("failure_mode_allowed"), (r, e)
    assert sc.meta(e, "estimate_reason") == "partial_body", e
    # The attack is real: the provider counts the max_tokens that lies past the first MiB.
    assert r["output"] == MAX_TOKENS > FORMER_DEFAULT, r
    assert cost_of(e) >= r["cost"], (r, e)
    return r, e


def test_sdk_body_over_max_request_bytes_priced_at_its_bound(stack):
    import openai

    oa = openai.OpenAI(api_key="sk-big", base_url="http://api.openai.com/v1", max_retries=0,
                       http_client=openai.DefaultHttpx2Client(proxy=stack.proxy, trust_env=False))
    r = oa.chat.completions.with_raw_response.create(model="gpt-4o-mini", max_tokens=MAX_TOKENS,
                                                     messages=[{"role": "user", "content": big_content(prose())}])
    assert r.status_code == 200
    check_bounded(stack, "gpt-4o-mini", lambda e: (int(e.get("request_bytes") or 0)) > 1_048_576
                  and e.get("authority") == "api.openai.com" and sc.meta(e, "estimate_reason") == "partial_body"
                  and "sk-big" not in json.dumps(e) and e.get("path") == "/v1/chat/completions")


def chunked_post(stack, body: bytes, pause_at: int | None) -> int:
    """POSTs body chunked over a raw HTTP/1.1 connection, the first chunk pause_at bytes long and
    then a pause (the attack: Envoy's buffer is exactly full while the upload waits)."""
    with socket.create_connection(("127.0.0.1", stack.ports["envoy"]), timeout=60) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n"
                  b"Content-Type: application/json\r\nAuthorization: Bearer sk-chunked\r\n"
                  b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        parts = [body] if pause_at is None else [body[:pause_at], body[pause_at:]]
        for i, part in enumerate(parts):
            s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
            if i == 0 and pause_at is not None:
                time.sleep(0.5)  # the attack's pause, not a synchronisation
        s.sendall(b"0\r\n\r\n")
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split(b" ", 2)[1])


@pytest.mark.parametrize("pause", [False, True], ids=["chunked", "chunked-pausing-at-1MiB"])
def test_chunked_body_over_max_request_bytes_priced_at_its_bound(stack, pause):
    model = "gpt-4o-mini-chunked-pause" if pause else "gpt-4o-mini-chunked"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": big_content(prose())}],
                       "max_tokens": MAX_TOKENS}).encode()
    assert chunked_post(stack, body, 1_048_576 if pause else None) == 200
    r, e = check_bounded(stack, model, lambda e: model_of(e) == model)
    # Not twice the first MiB's count, nor below the real size: the whole context window.
    assert sc.meta(e, "prompt_tokens") == 128_000, e


# Row 9: context the body does not show.

def test_previous_response_reserved_at_the_unseen_bound(stack):
    import openai

    oa = openai.OpenAI(api_key="sk-turns", base_url="http://api.openai.com/v1", max_retries=0,
                       http_client=openai.DefaultHttpx2Client(proxy=stack.proxy, trust_env=False))
    first = oa.responses.create(model="gpt-4o-mini-turns", input=(prose() + "\n") * 8, max_output_tokens=100)
    second = oa.responses.with_raw_response.create(model="gpt-4o-mini-turns", previous_response_id=first.id,
                                                   input="And then?", max_output_tokens=100)
    assert second.status_code == 200
    entries = await_entries(stack, lambda e: model_of(e) == "gpt-4o-mini-turns", 2)
    assert len(entries) == 2, entries
    later = [e for e in entries if sc.meta(e, "estimate_reason") == "previous_response"]
    assert len(later) == 1, entries
    e = later[0]
    r = next(x for x in records(stack) if x.get("request_id") == e.get("request_id"))
    # The attack is real: the provider bills the earlier turns, thousands of tokens the body of
    # this request does not show (its visible input is a few tokens).
    assert r["prompt"] > 10_000, r
    assert e.get("decision") == "allowed" and cost_of(e) >= r["cost"], (r, e)
    assert sc.meta(e, "prompt_tokens") >= UNSEEN, e


def test_no_request_passed_unchecked(stack):
    assert not [r for r in records(stack) if r.get("failure_mode_allowed")]
