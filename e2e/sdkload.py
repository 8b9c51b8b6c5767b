"""What the SDK load clients (bedrockload.py, geminiload.py) share: one summary counted under a
lock, worker threads that alternate two operations until a deadline, and the summary written as
JSON. Each client brings its SDK calls and how its SDK says "throttled"."""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

SAMPLES = 5


def run(name: str, ops: dict[str, Callable[[str], int]], tally: str, threads: int, start_at: float,
        duration: float, out: str, throttled: Callable[[Exception], str | None], prompt: Callable[[int, int], str]) -> dict:
    """Runs `threads` workers from start_at for duration seconds, each alternating the operations
    of ops (name -> call(text) returning the count added to s[tally]). throttled(e) is None for a
    throttled call, else the error's sample text. Writes the summary to out and returns it."""
    lock = threading.Lock()
    s = {"name": name, "calls": 0, "ok": 0, "throttled": 0, "errors": 0, "error_samples": [], tally: 0,
         "by_op": dict.fromkeys(ops, 0)}
    names = list(ops)
    time.sleep(max(0.0, start_at - time.time()))
    s["started"] = time.time()
    deadline = s["started"] + duration

    def failed(sample: str | None) -> None:
        with lock:
            if sample is None:
                s["throttled"] += 1
                return
            s["errors"] += 1
            if len(s["error_samples"]) < SAMPLES:
                s["error_samples"].append(sample[:300])

    def work(i: int) -> None:
        n = 0
        while time.time() < deadline:
            op = names[(n + i) % len(names)]
            text = prompt(i, n)
            n += 1
            with lock:
                s["calls"] += 1
            try:
                got = ops[op](text)
                with lock:
                    s["ok"] += 1
                    s["by_op"][op] += 1
                    s[tally] += got
            except Exception as e:  # noqa: BLE001 - every failure is counted and sampled
                failed(throttled(e))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s["ended"] = time.time()
    with open(out, "w") as f:
        json.dump(s, f)
    return s
