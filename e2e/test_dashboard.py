"""The operator's view of a real run: Envoy, two ext-authz replicas on Redis and the official
SDKs over budget for 50 s, scraped every second by a real Prometheus (Debian's `prometheus`,
installed by scripts/deps.sh with promtool). Every panel of the shipped Grafana dashboard is
queried as Grafana would query it and must answer with data, but for the panels of failures this
run has none of; the answers are drawn on the dashboard's grid (dashboard.svg), and
`ext-authz top -once` is run against both replicas under the load (top.txt, top.svg). The README's
pictures (docs/img/dashboard.svg, docs/img/top.svg) are these files from such a run:
`E2E_UPDATE_DOCS=1 ./e2e/run.sh e2e/test_dashboard.py` writes them there; every run checks that
the committed picture shows the dashboard's panels as the dashboard file has them."""

from __future__ import annotations

import os
import sys
import re
import shutil
import subprocess
import time

import dashboard as dash
import harness as h
import report
import scenarios as sc

DURATION = 50.0
OTHER_MODEL = "gpt-4o"  # a second openai model: the per-model rule keeps a bucket for each
# Panels of failures that a healthy run does not have: no store error, no settlement error, no
# provider 429 (the mock's limits are far above the rules'). Every other panel must show data.
ALLOWED_EMPTY = {"Failures by reason", "Settlement errors", "Provider corrections and 429s"}

RULES = """  - name: openai-per-model
    match: {provider: openai}
    per: [model]
    tokens: {limit: 30000, period: minute}
    requests: {limit: 300, period: minute}
    max_wait: 300ms
    max_concurrent: 6
  - name: claude
    match: {provider: anthropic}
    per: [model]
    input_tokens: {limit: 20000, period: minute}
    output_tokens: {limit: 8000, period: minute}
    requests: {limit: 100, period: minute}
  - name: trial
    match: {model: "gpt-4o*"}
    tokens: {limit: 8000, period: minute}
    shadow: true
  - name: openai-spend
    match: {provider: openai}
    cost: {limit: 1000, currency: USD, period: month}"""


def _prometheus(stack: h.Stack) -> tuple[h.Proc, str]:
    port = h.free_port()
    targets = ", ".join(f'"127.0.0.1:{stack.ports[f"admin-{i}"]}"' for i in range(stack.replicas))
    cfg = stack.dir / "prometheus.yml"
    cfg.write_text(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: llm-ratelimit
    static_configs: [{{targets: [{targets}]}}]
""")
    proc = h.start("prometheus", [shutil.which("prometheus") or "prometheus", f"--config.file={cfg}",
                                  f"--storage.tsdb.path={stack.dir / 'prometheus'}",
                                  f"--web.listen-address=127.0.0.1:{port}"], stack.dir)
    url = f"http://127.0.0.1:{port}"
    h.wait_until(lambda: h.http_get(url + "/-/ready")[0] == 200, 60, "prometheus", proc)
    return proc, url


def _top(stack: h.Stack) -> str:
    admins = [a for i in range(stack.replicas) for a in ("-admin", f"http://127.0.0.1:{stack.ports[f'admin-{i}']}")]
    out = subprocess.run([str(h.BIN / "ext-authz"), "top", "-once", *admins,
                          "-provider", "openai", "-model", sc.OPENAI_MODEL, "-model", OTHER_MODEL, "-interval", "2s", "-width", "120"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _both_rates(frame: str) -> bool:
    m = re.search(r"admitted ([0-9.]+)/s  denied ([0-9.]+)/s", frame)
    return bool(m) and float(m.group(1)) > 0 and float(m.group(2)) > 0


def test_dashboard_and_top_on_a_real_run(tmp_path):
    assert shutil.which("prometheus"), "prometheus is missing: scripts/deps.sh installs Debian's prometheus package"
    # Anthropic's prompts are estimated: learning them fills the learned-estimates panel.
    limits = sc.limits_yaml(RULES).replace("pricing: {default_output_tokens: 4096}",
                                           "pricing: {default_output_tokens: 4096, learn: {enabled: true, min_samples: 20}}")
    assert "learn:" in limits
    stack = h.Stack("dashboard", tmp_path / "dashboard", limits,
                    ["-openai-tpm", "100000000", "-anthropic-tpm", "100000000", "-latency", "150ms", "-completion-tokens", "40"],
                    replica_args=["-decision-log", str(tmp_path / "decisions-{i}.log")])
    prom = None
    try:
        stack.up()
        prom, prom_url = _prometheus(stack)
        start = time.time()
        loads = [subprocess.Popen([sys.executable, str(h.E2E / "loadgen.py"), "--proxy", stack.proxy,
                                   "--out", str(stack.dir / f"load-{i}.json"), "--duration", str(DURATION),
                                   "--name", f"load-{i}", *args], cwd=stack.dir,
                                  stdout=subprocess.DEVNULL, stderr=open(stack.dir / f"load-{i}.err", "w"))
                 for i, args in enumerate([
                     ["--provider", "openai", "--model", sc.OPENAI_MODEL, "--threads", "4", "--max-tokens", "256"],
                     ["--provider", "openai", "--model", OTHER_MODEL, "--threads", "4", "--max-tokens", "256"],
                     ["--provider", "anthropic", "--model", sc.ANTHROPIC_MODEL, "--threads", "3", "--max-tokens", "300"]])]
        # top reads both replicas and sums their rates. A 2 s frame can still fall where every
        # client is backing off: the frames are read, under the load, until one shows both rates
        # or the load nears its end.
        time.sleep(DURATION * 0.5)
        frames = [_top(stack)]
        while not _both_rates(frames[-1]) and time.time() - start < DURATION * 0.85:
            frames.append(_top(stack))
        frame = frames[-1]
        for p in loads:
            p.wait(timeout=DURATION + 120)
            assert p.returncode == 0, (stack.dir / "load-0.err").read_text()[-2000:]
        time.sleep(4)  # the last scrapes and settlements
        end = time.time()
        panels = dash.evaluate(prom_url, dash.load(), start - 2, end, 2.0, "4s")
    finally:
        if prom:
            prom.stop()
        stack.down()

    out = report.REPORT_DIR / "dashboard"
    out.mkdir(parents=True, exist_ok=True)
    caption = (f"deploy/grafana/llm-ratelimit.json on Prometheus, {end - start:.0f} s of e2e/test_dashboard.py: "
               f"two replicas, the openai and anthropic SDKs through Envoy over budget")
    drawn = dash.svg(panels, start - 2, end, caption)
    (out / "dashboard.svg").write_text(drawn)
    (out / "top.txt").write_text(frame)
    (out / "top-frames.txt").write_text("\n".join(frames))
    top_svg = dash.terminal_svg(frame, f"ext-authz top -once -admin ... -admin ... -model {sc.OPENAI_MODEL} -model {OTHER_MODEL}, against both replicas of the same run")
    (out / "top.svg").write_text(top_svg)
    if os.environ.get("E2E_UPDATE_DOCS"):
        shutil.copy(out / "dashboard.svg", h.ROOT / "docs" / "img" / "dashboard.svg")
        shutil.copy(out / "top.svg", h.ROOT / "docs" / "img" / "top.svg")

    by_title = {p["title"]: p for p in panels if p["type"] != "row"}
    empty = sorted(t for t, p in by_title.items() if not p["series"])
    assert set(empty) <= ALLOWED_EMPTY, f"panels without data: {empty}"
    names = lambda t: {s["name"] for s in by_title[t]["series"]}  # noqa: E731
    assert {"allowed", "denied"} <= names("Decisions by result"), names("Decisions by result")
    assert any(n.startswith("trial") and "denied" in n for n in names("Shadow rules: would-be decisions")), \
        names("Shadow rules: would-be decisions")
    # The openai budget was drained: its lowest level went below a fifth of the capacity.
    levels = [v for s in by_title["Lowest bucket level, per rule"]["series"] if s["name"].startswith("openai-per-model tokens")
              for _, v in s["points"]]
    assert levels and min(levels) < 0.2, levels
    assert "usage" in names("Settlement results"), names("Settlement results")
    assert any("openai-spend" in n for n in names("Spend per rule")), names("Spend per rule")
    assert any(n.startswith("factor anthropic") for n in names("Learned prompt estimates")), names("Learned prompt estimates")

    # Envoy spreads the checks over both replicas (round robin on a cluster of their own: on one
    # shared with the response path, the checks of admitted requests all land on one replica).
    decided = [sum('"ev":"decision"' in ln for ln in open(tmp_path / f"decisions-{i}.log")) for i in range(2)]
    assert min(decided) > 0.3 * sum(decided), f"decisions per replica: {decided}"

    # top, under the load: the openai bucket below capacity, denials per second above zero.
    for model in (sc.OPENAI_MODEL, OTHER_MODEL):
        assert re.search(rf"(?m)^openai-per-model\s+\*\s+{model}\s+tokens\s+\[", frame), frame
    assert _both_rates(frame), frame
    assert "  replicas 2/2\n" in frame, frame

    # The committed pictures show this dashboard's panels, in its order.
    committed = h.ROOT / "docs" / "img" / "dashboard.svg"
    assert committed.exists() and (h.ROOT / "docs" / "img" / "top.svg").exists()
    assert dash.titles(committed.read_text()) == dash.titles(drawn), \
        "docs/img/dashboard.svg is out of date: E2E_UPDATE_DOCS=1 ./e2e/run.sh e2e/test_dashboard.py"
