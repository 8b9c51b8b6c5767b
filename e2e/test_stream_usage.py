"""OpenAI streams settle from their usage when the client closes the connection at data: [DONE],
through the real Envoy (the shipped envoy.yaml: ext_proc in observability mode, the response body
STREAMED), two ext-authz replicas on one Redis, the mock provider and the `openai` SDK.

The `openai` SDK stops reading a stream at data: [DONE] and closes the response at once. When the
reply's own end (its last chunk, a compressed stream's trailer) has not reached Envoy by then,
Envoy resets the request (DC, downstream_remote_disconnect, in its access log) and ends the
ext_proc stream without end_of_stream, after the usage and [DONE] passed it. Under load this
happens to a few percent of streams; here the mock holds every chat stream open 1 s after its
[DONE] (-done-linger), so that every stream the SDK reads is cut that way.

Asserted: the SDK read the usage of every stream, Envoy logged most of them as DC (the path under
test was taken: a client starved for a whole second after [DONE] would read the reply's end
instead), and the replicas settled every answer from its usage: not one `no_usage`.
"""

from __future__ import annotations

import json

import pytest

import harness as h
import scenarios as sc

DURATION = 10.0
LINGER = "1s"
RULES = """  - name: openai
    match: {provider: openai}
    per: [model]
    tokens: {limit: 100000000, period: minute}
    refund: true"""


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("stream-usage")
    stack = h.Stack("stream-usage", workdir / "stream-usage", sc.limits_yaml(RULES),
                    ["-openai-tpm", "0", "-latency", "100ms", "-completion-tokens", "16", "-done-linger", LINGER],
                    replicas=2)
    out: dict = {}
    try:
        stack.up()
        clients = [{"key": f"sk-stream-usage-{i}", "threads": 4, "max_tokens": 64, "model": sc.OPENAI_MODEL,
                    "stream_every": 1, "offset": 5 * i, "ramp": 1} for i in range(2)]
        out["clients"] = sc.client_totals(sc.run_load(stack, "stream-usage", DURATION, python=clients))
        out["settled"] = stack.await_settled()
        out["answered"] = out["settled"].pop("answered")
        log = [e for e in sc.access_log(stack) if e.get("path") == "/v1/chat/completions"]
        out["envoy"] = {"requests": len(log), "ok": sum(1 for e in log if e.get("status") == 200),
                        "cut": sum(1 for e in log if e.get("status") == 200 and "DC" in str(e.get("flags")))}
    finally:
        stack.down()
    (h.E2E / "report").mkdir(exist_ok=True)
    (h.E2E / "report" / "stream_usage.json").write_text(json.dumps(out, indent=1))
    return out


def test_streams_cut_at_done_settle_from_their_usage(cut):
    c, s, e = cut["clients"], cut["settled"], cut["envoy"]
    assert c["errors"] == 0 and c["rate_limited"] == 0, c
    assert c["streamed"] >= 20 and c["stream_usage"] == c["streamed"], c
    assert e["ok"] == cut["answered"] == c["streamed"], (e, cut["answered"], c)
    assert e["cut"] >= e["ok"] / 2, e
    assert s.get("no_usage", 0) == 0, s
    assert s.get("usage") == cut["answered"], s
