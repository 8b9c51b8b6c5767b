"""pytest wiring of the end-to-end suite: the scenarios start together in the background when the
session starts (each on its own stack), and each test waits for the scenario it asserts on."""

from __future__ import annotations

import concurrent.futures as cf
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402
import scenarios as sc  # noqa: E402

RUN_DIR = report.REPORT_DIR / "run"
_runs: dict[str, cf.Future] = {}
SLIDING_DELAY_S = 40.0


def _after(delay: float, fn, *args):
    time.sleep(delay)
    return fn(*args)


@pytest.fixture(scope="session", autouse=True)
def scenario_runs(request):
    """Starts every scenario at once (separate stacks do not interfere) and waits for them all at
    the end of the session, so that no process outlives it. Only when a test of test_e2e.py is
    selected: a run of another file alone (pytest e2e/test_reconcile.py) starts none of them."""
    shutil.rmtree(report.REPORT_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    if not any(item.module.__name__ == "test_e2e" for item in request.session.items):
        yield _runs
        return
    pool = cf.ThreadPoolExecutor(max_workers=8, thread_name_prefix="scenario")
    _runs["seed-token_bucket"] = pool.submit(sc.seed, "token_bucket", RUN_DIR)
    # The sliding-window seed opens with its whole window free: its first seconds are the
    # suite's most sensitive (hundreds of first calls at once). It starts once the others are
    # past their own start-up, when every stack, SDK and first burst competes for the 2 cores
    # (checks then passed Envoy's 1 s ext_authz timeout and were let through unchecked).
    _runs["seed-sliding_window"] = pool.submit(_after, SLIDING_DELAY_S, sc.seed, "sliding_window", RUN_DIR)
    _runs["control"] = pool.submit(sc.control, RUN_DIR)
    _runs["tenants"] = pool.submit(sc.tenants, RUN_DIR)
    _runs["priority"] = pool.submit(sc.priority, RUN_DIR)
    _runs["edges"] = pool.submit(sc.edges, RUN_DIR)
    yield _runs
    pool.shutdown(wait=True, cancel_futures=True)


def result(name: str) -> dict:
    """The measurements of a scenario (its exception, with the processes' last lines, if it failed)."""
    return _runs[name].result(timeout=840)


def pytest_terminal_summary(terminalreporter):
    if report.REPORT_DIR.exists():
        files = sorted(p for p in report.REPORT_DIR.iterdir() if p.suffix in (".json", ".svg"))
        terminalreporter.write_sep("-", "e2e report")
        terminalreporter.write_line(f"reports and charts in {report.REPORT_DIR}:")
        for p in files:
            terminalreporter.write_line(f"  {p.name}")
        terminalreporter.write_line(f"process logs, limits files and derived envoy.yaml per scenario in {RUN_DIR}")
