"""The shipped compose stack, built and run as the README says: `docker compose up --build` of
docker-compose.yaml with its override (Redis, two ext-authz replicas, Envoy, the mock provider
over TLS under the providers' host names), driven from the host through Envoy's published port
127.0.0.1:10000 with the official OpenAI and Anthropic SDKs.

Needs a Docker engine and the Compose plugin (scripts/deps.sh) and, where no registry answers,
the base-image stand-ins (e2e/compose/standins.sh, run here first). It fails, never skips, when
any of them is missing. Run alone and after the rest of the suite (make compose): it publishes
fixed ports and takes the machine's cores while it builds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import anthropic
import openai
import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "llm-ratelimit"  # the name: of docker-compose.yaml
PROXY = "http://127.0.0.1:10000"
MOCK = "http://127.0.0.1:8080"


def sh(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def compose(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    return sh("docker", "compose", *args, timeout=timeout, check=check)


def mock_stats() -> dict:
    with urllib.request.urlopen(MOCK + "/stats", timeout=5) as r:
        return json.load(r)


def project_objects() -> dict[str, list[str]]:
    """Every container, network and volume of the project (by compose's label)."""
    label = f"label=com.docker.compose.project={PROJECT}"
    return {
        "containers": sh("docker", "ps", "-aq", "--filter", label).stdout.split(),
        "networks": sh("docker", "network", "ls", "-q", "--filter", label).stdout.split(),
        "volumes": sh("docker", "volume", "ls", "-q", "--filter", label).stdout.split(),
    }


def openai_client(max_retries: int = 2) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-compose-test",
        base_url="http://api.openai.com/v1",
        max_retries=max_retries,
        timeout=30.0,
        http_client=openai.DefaultHttpx2Client(proxy=PROXY, trust_env=False),
    )


def anthropic_client(max_retries: int = 2) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-ant-compose-test",
        base_url="http://api.anthropic.com",
        max_retries=max_retries,
        timeout=30.0,
        http_client=anthropic.DefaultHttpxClient(proxy=PROXY, trust_env=False),
    )


@pytest.fixture(scope="module")
def stack():
    # The engine and the plugin: missing is a failure, never a skip.
    assert sh("docker", "info", "--format", "{{.ServerVersion}}", check=False).returncode == 0, \
        "no Docker engine answers: run scripts/deps.sh (make deps)"
    assert compose("version", check=False).returncode == 0, "no docker compose plugin: run scripts/deps.sh"
    sh(str(ROOT / "e2e" / "compose" / "standins.sh"), timeout=1800)
    compose("down", "-v", "--remove-orphans", timeout=120)
    t0 = time.monotonic()
    # As the README says (docker compose up --build), detached, waiting on every healthcheck.
    compose("up", "--build", "-d", "--wait", "--wait-timeout", "180", timeout=1500)
    up_s = time.monotonic() - t0
    # Envoy's listener answers once its ext-authz cluster has a healthy host.
    deadline = time.monotonic() + 60
    while True:
        try:
            openai_client(max_retries=0).models.list()
            break
        except openai.APIError:
            assert time.monotonic() < deadline, compose("logs", "--tail", "50").stdout
            time.sleep(0.2)
    yield {"up_s": up_s}
    compose("down", "-v", "--remove-orphans", timeout=120)


def test_request_through_envoy_is_answered_by_the_mock(stack):
    before = mock_stats()["providers"]
    chat = openai_client().chat.completions.create(
        model="gpt-4o-mini", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content
    msg = anthropic_client().messages.create(
        model="claude-haiku-4-5", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text
    after = mock_stats()["providers"]
    for p in ("openai", "anthropic"):
        assert after[p]["admitted"] == before.get(p, {}).get("admitted", 0) + 1, (p, before, after)


def _inspect(service: str) -> list[dict]:
    ids = compose("ps", "-q", service).stdout.split()
    assert ids, service
    return json.loads(sh("docker", "inspect", *ids).stdout)


def _proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def test_containers_run_as_built(stack):
    for c in _inspect("ext-authz"):
        assert c["Config"]["User"] == "nonroot:nonroot"
        assert c["HostConfig"]["ReadonlyRootfs"] is True
        assert c["HostConfig"]["CapDrop"] == ["ALL"]
        assert "no-new-privileges:true" in c["HostConfig"]["SecurityOpt"]
        # What the kernel says of the running process, not only what was asked for.
        st = _proc_status(c["State"]["Pid"])
        assert st["Uid"].split()[0] == "65532" and st["Gid"].split()[0] == "65532", st["Uid"]
        assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0, st["CapEff"]
        assert st["NoNewPrivs"] == "1"
        root = next(l for l in Path(f"/proc/{c['State']['Pid']}/mountinfo").read_text().splitlines()
                    if l.split()[4] == "/")
        assert "ro" in root.split()[5].split(","), root
    assert len(_inspect("ext-authz")) == 2
    (mock,) = _inspect("mockprovider")
    assert _proc_status(mock["State"]["Pid"])["Uid"].split()[0] == "65532"
    for svc in ("redis", "mockprovider"):
        for c in _inspect(svc):
            assert c["State"]["Health"]["Status"] == "healthy", (svc, c["State"]["Health"])


def _call(client: openai.OpenAI) -> tuple[str, float]:
    """One small chat call: its outcome (ok, rate_limited, 503, or the error's class) and its time."""
    t = time.monotonic()
    try:
        client.chat.completions.create(model="gpt-4o-mini", max_tokens=8,
                                       messages=[{"role": "user", "content": "hi"}])
        out = "ok"
    except openai.RateLimitError:
        out = "rate_limited"
    except openai.APIStatusError as e:
        out = str(e.status_code)
    except openai.APIError as e:
        out = type(e).__name__
    return out, time.monotonic() - t


def _tenant_limit(client: openai.OpenAI) -> int:
    r = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    return int(r.headers["x-ratelimit-limit-tokens"])


def _write_in_place(path: Path, text: str) -> None:
    # The file is bind-mounted by itself: the replicas see the same inode, so it is rewritten in
    # place (an editor's rename to a new inode would not reach the containers).
    with open(path, "r+") as f:
        f.write(text)
        f.truncate()


def test_limits_file_hot_reloaded(stack):
    """Editing the mounted limits file (internal/config/example.yaml) changes every replica's
    decisions without a restart: the tenant share's limit, in each answer's headers."""
    path = ROOT / "internal" / "config" / "example.yaml"
    original = path.read_text()
    old = "per: [tenant]\n    tokens: {limit: 10000, period: minute}"
    assert original.count(old) == 1
    client = openai_client(max_retries=0)
    assert _tenant_limit(client) == 10000
    try:
        _write_in_place(path, original.replace(old, old.replace("10000", "9000")))
        deadline = time.monotonic() + 15
        streak, i = 0, 0
        # Both replicas: ten answers in a row (Envoy spreads them) carry the new limit.
        while streak < 10:
            assert time.monotonic() < deadline, "the edited limits file was not reloaded"
            i += 1
            streak = streak + 1 if _tenant_limit(client) == 9000 else 0
    finally:
        _write_in_place(path, original)
    deadline = time.monotonic() + 15
    while _tenant_limit(client) != 10000:
        assert time.monotonic() < deadline, "the restored limits file was not reloaded"
        time.sleep(0.1)


def test_replica_killed_under_load_fails_no_call(stack):
    """docker kill of one ext-authz replica while calls run: Envoy's retry policy and health
    check move the checks to the other replica; no call fails and none passes unchecked."""
    import threading
    client = openai_client(max_retries=0)
    results: list[str] = []
    stop = threading.Event()

    def loop(i: int) -> None:
        while not stop.is_set():
            results.append(_call(client)[0])

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(2)  # load before the kill: the figure is the calls around it
    victim = compose("ps", "-q", "ext-authz").stdout.split()[0]
    sh("docker", "kill", victim)
    n_at_kill = len(results)
    deadline = time.monotonic() + 30
    while len(results) < n_at_kill + 100 and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    assert len(results) >= n_at_kill + 100, len(results)
    assert set(results) <= {"ok", "rate_limited"}, {r: results.count(r) for r in set(results)}
    # None of them passed unchecked (Envoy's failure_mode_allow would mark them at the mock).
    logs = compose("logs", "--no-log-prefix", "envoy").stdout
    assert '"failure_mode_allowed":"true"' not in logs
    compose("up", "-d", "--wait", "--wait-timeout", "60", timeout=120)


def test_redis_disconnected_applies_the_failure_policy(stack):
    """docker network disconnect of Redis from the replicas' network: every check gets the
    limits file's failure policy (deny: 503, which the SDKs retry) within the Redis timeout, none
    hangs; after reconnecting, decisions are exact again."""
    client = openai_client(max_retries=0)
    assert _call(client)[0] == "ok"
    (redis,) = compose("ps", "-q", "redis").stdout.split()
    net = f"{PROJECT}_default"
    sh("docker", "network", "disconnect", net, redis)
    try:
        outs = [_call(client) for _ in range(20)]
        assert {o for o, _ in outs} == {"503"}, outs
        assert max(d for _, d in outs) < 1.0, outs
    finally:
        sh("docker", "network", "connect", "--alias", "redis", net, redis)
    deadline = time.monotonic() + 10
    while _call(client)[0] != "ok":
        assert time.monotonic() < deadline, "no exact decision 10 s after Redis came back"
        time.sleep(0.05)
    recovered = 10 - (deadline - time.monotonic())
    print(f"redis reconnected: exact again after {recovered:.2f} s")


def test_redis_restarted_empty_decisions_exact_again(stack):
    """docker compose restart redis: the new Redis has no buckets and no script cache (the
    replicas' EVALSHA/FCALL meet NOSCRIPT or no function and load it again); decisions are
    exact again within a second of Redis answering."""
    client = openai_client(max_retries=0)
    assert _call(client)[0] == "ok"
    compose("restart", "redis", timeout=60)
    t = time.monotonic()
    while _call(client)[0] != "ok":
        assert time.monotonic() - t < 10, "no exact decision 10 s after Redis restarted"
        time.sleep(0.05)
    took = time.monotonic() - t
    print(f"redis restarted: exact again {took:.2f} s after compose restart returned")
    assert took < 1.0


def test_scaled_to_three_replicas_under_load(stack):
    """docker compose up -d --no-deps --scale ext-authz=3 while calls run: three replicas run
    and no call fails while the third joins; back to two after."""
    import threading
    client = openai_client(max_retries=0)
    results: list[str] = []
    stop = threading.Event()

    def loop(i: int) -> None:
        while not stop.is_set():
            results.append(_call(client)[0])

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        compose("up", "-d", "--no-deps", "--wait", "--scale", "ext-authz=3", "ext-authz", timeout=120)
        assert len(compose("ps", "-q", "ext-authz").stdout.split()) == 3
        n = len(results)
        deadline = time.monotonic() + 20
        while len(results) < n + 50 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert set(results) <= {"ok", "rate_limited"}, {r: results.count(r) for r in set(results)}
    compose("up", "-d", "--no-deps", "--wait", "--scale", "ext-authz=2", "ext-authz", timeout=120)


# The SDK load: Anthropic's organisation budget (internal/config/example.yaml: 40,000 tokens a
# minute, no per-tenant share) against the mock's 41,000 per model (docker-compose.override.yaml),
# a token bucket on both sides. max_tokens equals the mock's answer length (its default
# -completion-tokens, 16), so what is reserved is what is used, and prompts padded to about
# 1,600 tokens make the token budget bind before the 50 requests a minute.
LOAD_S = 75.0
LOAD_MODEL = "claude-sonnet-4-5"  # used by no other test here: the mock's bucket for it is full
MOCK_ANTHROPIC_TPM = 41000


def _load(tmp: Path, name: str, provider: str, model: str, threads: int, pad: int, start_at: float) -> subprocess.Popen:
    argv = [sys.executable, str(ROOT / "e2e" / "loadgen.py"), "--proxy", PROXY, "--provider", provider,
            "--model", model, "--key", f"sk-compose-{name}", "--name", name, "--threads", str(threads),
            "--max-tokens", "16", "--pad-bytes", str(pad), "--duration", str(LOAD_S),
            "--start-at", f"{start_at:.3f}", "--stream-every", "3", "--out", str(tmp / f"{name}.json")]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp / f"{name}.log", "w"))


def test_sdk_load_uses_the_allowance_without_provider_429s(stack, tmp_path):
    """Several processes of the official SDKs on the host, far above the budgets for 75 s: the
    provider refuses nothing, and the Anthropic calls admitted use at least 95% of what the
    provider allows over the span of their admissions."""
    before = mock_stats()["providers"]
    start_at = time.time() + 3
    procs = {f"anthropic-{i}": _load(tmp_path, f"anthropic-{i}", "anthropic", LOAD_MODEL, 4, 6000, start_at)
             for i in range(3)}
    procs["openai-0"] = _load(tmp_path, "openai-0", "openai", "gpt-4o-mini", 4, 3000, start_at)
    for name, p in procs.items():
        assert p.wait(timeout=LOAD_S + 240) == 0, (name, (tmp_path / f"{name}.log").read_text()[-3000:])
    after = mock_stats()["providers"]
    runs = {n: json.loads((tmp_path / f"{n}.json").read_text()) for n in procs}
    anth = [r for n, r in runs.items() if n.startswith("anthropic")]
    # An answer ends about the mock's latency (0.3 s) after its admission: the span of the
    # admissions is that of the successful calls' ends.
    span = max(r["last_ok"] for r in anth) - min(r["first_ok"] for r in anth)
    admitted = after["anthropic"]["admitted_tokens"] - before.get("anthropic", {}).get("admitted_tokens", 0)
    allowance = MOCK_ANTHROPIC_TPM + MOCK_ANTHROPIC_TPM / 60 * span
    offered = sum(r["calls"] for r in anth)
    print(f"compose SDK load: anthropic admitted {admitted} tokens over {span:.1f} s, "
          f"{admitted / allowance:.3f} of the provider's allowance {allowance:.0f}; "
          f"{offered} calls, {sum(r['ok'] for r in anth)} ok; openai ok {runs['openai-0']['ok']}")
    for n, r in runs.items():
        # Every call ends in success or a clean rate-limit error (the limiter's, after the SDK's
        # retries honoured its retry-after).
        assert r["errors"] == 0 and r["too_large"] == 0, (n, r["error_samples"])
        assert r["ok"] > 0, (n, r)
    for prov in ("anthropic", "openai"):
        assert after[prov]["rate_limited"] == before.get(prov, {}).get("rate_limited", 0), (prov, before, after)
    assert admitted >= 0.95 * allowance, (admitted, allowance, span)


def test_limiter_answers_429_before_the_provider(stack):
    # Late in the file: it exhausts the tenant's share, and every call of this file comes from the
    # host, one address, so one tenant (the shipped envoy.yaml names the tenant by the address).
    client = openai_client(max_retries=0)
    seen = None
    # The tenant's share is 10000 tokens/min (internal/config/example.yaml): 4000-token requests
    # exhaust it by the third.
    for _ in range(5):
        try:
            client.chat.completions.create(model="gpt-4o", max_tokens=4000,
                                           messages=[{"role": "user", "content": "hi"}])
        except openai.RateLimitError as e:
            seen = e
            break
    assert seen is not None, "no 429 from the limiter"
    h = seen.response.headers
    assert int(h["retry-after"]) >= 1 and int(h["retry-after-ms"]) > 0
    assert seen.body["code"] == "rate_limit_exceeded", seen.body
    # The 429 came from the limiter: the provider refused nothing.
    assert mock_stats()["providers"]["openai"]["rate_limited"] == 0


def test_down_removes_everything():
    # Last in the file: the stack's own `docker compose down -v` leaves nothing of the project.
    compose("down", "-v", "--remove-orphans", timeout=120)
    assert project_objects() == {"containers": [], "networks": [], "volumes": []}
