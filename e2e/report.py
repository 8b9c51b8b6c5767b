"""What the provider allowed, what it admitted, and a chart a person can look at.

Times are the mock provider's (admission time of each request it answered 200).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

# E2E_REPORT_DIR moves it: each pytest session empties it at its start, so two sessions run at
# once (two engineers on one machine) need one each.
REPORT_DIR = Path(os.environ.get("E2E_REPORT_DIR") or Path(__file__).resolve().parent / "report").resolve()


def admissions(records: list[dict], provider: str, key_prefix: str | None = None) -> list[tuple[float, int]]:
    """(time, cost) of every request the mock admitted for provider, in time order."""
    out = [(r["t"], r["cost"]) for r in records
           if r["status"] == 200 and r["provider"] == provider
           and (key_prefix is None or r.get("key", "").startswith(key_prefix))]
    out.sort()
    return out


def token_bucket_violations(adm: list[tuple[float, int]], limit: float, period: float,
                            jitter: float = 0.0) -> list[dict]:
    """Admissions that a token bucket (capacity limit, refilled at limit/period, full at the first
    admission) could not have paid. Empty when the admissions stay within the provider's mode.

    jitter (seconds) forgives the refill of that long: for replaying a bucket that was kept by
    someone else's clock (the limiter's, in Redis) on the mock's arrival times."""
    if not adm:
        return []
    rate = limit / period
    level, last = float(limit), adm[0][0]
    bad = []
    for t, cost in adm:
        level = min(float(limit), level + (t - last) * rate)
        last = t
        if cost > level + jitter * rate + 1e-6:
            bad.append({"t": t, "cost": cost, "level": round(level, 1)})
        level -= cost
    return bad


def max_window_sum(adm: list[tuple[float, int]], period: float) -> tuple[int, float]:
    """The most admitted in any window of period seconds (closed at the right), and where it ends."""
    best, best_t, s, i = 0, 0.0, 0, 0
    for j, (t, c) in enumerate(adm):
        s += c
        while adm[i][0] <= t - period:
            s -= adm[i][1]
            i += 1
        if s > best:
            best, best_t = s, t
    return best, best_t


def allowance(mode: str, limit: float, period: float, span: float) -> float:
    """The most a provider in this mode admits between two admissions span seconds apart, both
    included: a full bucket plus its refill, or the limit once per started window."""
    if mode == "token_bucket":
        return limit + limit * span / period
    return limit * max(1, math.ceil(span / period - 1e-9))


def per_second(adm: list[tuple[float, int]], t0: float, t1: float) -> list[int]:
    n = max(1, int(math.ceil(t1 - t0)) + 1)
    bins = [0] * n
    for t, c in adm:
        i = int(t - t0)
        if 0 <= i < n:
            bins[i] += c
    return bins


def write_json(name: str, data: dict) -> Path:
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    p = REPORT_DIR / f"{name}.json"
    p.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    return p


def svg_chart(name: str, title: str, series: list[dict], limit_rate: float, mode: str,
              limit: float, period: float, t0: float, t1: float) -> Path:
    """Admitted tokens per second (1 s bars and a 10 s moving average) against the limit's rate,
    and, below, cumulative admitted tokens against the provider's allowance curve.

    series: [{"label", "color", "adm": [(t, cost)]}], stacked in the bars, summed in the curves.
    """
    W, H, L, R, T, GAP, PH = 960, 620, 70, 20, 40, 60, 230
    span = max(1.0, t1 - t0)
    bins = [per_second(s["adm"], t0, t1) for s in series]
    n = max(len(b) for b in bins)
    total = [sum(b[i] if i < len(b) else 0 for b in bins) for i in range(n)]
    ymax = max([limit_rate * 1.5] + total) * 1.1 or 1
    x = lambda sec: L + (W - L - R) * sec / span  # noqa: E731
    y1 = lambda v: T + PH - PH * v / ymax  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="22" font-size="15" font-weight="bold">{_esc(title)}</text>']
    # Panel 1: tokens per second.
    out.append(f'<line x1="{L}" y1="{T + PH}" x2="{W - R}" y2="{T + PH}" stroke="black"/>')
    out.append(f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + PH}" stroke="black"/>')
    for k in range(5):
        v = ymax * k / 4
        out.append(f'<text x="{L - 6}" y="{y1(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    bw = max(1.0, (W - L - R) / span - 1)
    for i in range(n):
        base = 0
        for s, b in zip(series, bins):
            v = b[i] if i < len(b) else 0
            if v:
                out.append(f'<rect x="{x(i):.1f}" y="{y1(base + v):.1f}" width="{bw:.1f}" '
                           f'height="{y1(base) - y1(base + v):.1f}" fill="{s["color"]}" opacity="0.55"/>')
            base += v
    avg = []
    for i in range(n):
        w = total[max(0, i - 9):i + 1]
        avg.append(sum(w) / len(w))
    pts = " ".join(f"{x(i + 0.5):.1f},{y1(v):.1f}" for i, v in enumerate(avg))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#1f4e9c" stroke-width="2"/>')
    out.append(f'<line x1="{L}" y1="{y1(limit_rate):.1f}" x2="{W - R}" y2="{y1(limit_rate):.1f}" '
               f'stroke="#c0392b" stroke-width="2" stroke-dasharray="6,4"/>')
    out.append(f'<text x="{W - R}" y="{y1(limit_rate) - 6:.1f}" text-anchor="end" fill="#c0392b">'
               f'provider limit {limit_rate:,.0f} tokens/s ({limit:,.0f} per {period:.0f} s)</text>')
    out.append(f'<text x="{L}" y="{T - 6}">admitted tokens per second (bars: 1 s, blue line: 10 s average)</text>')
    # Panel 2: cumulative admitted vs allowance.
    T2 = T + PH + GAP
    cum, acc = [], 0
    for i in range(n):
        acc += total[i]
        cum.append(acc)
    allow = [allowance(mode, limit, period, min(i + 1, span)) for i in range(n)]
    ymax2 = max(allow + cum) * 1.1 or 1
    y2 = lambda v: T2 + PH - PH * v / ymax2  # noqa: E731
    out.append(f'<line x1="{L}" y1="{T2 + PH}" x2="{W - R}" y2="{T2 + PH}" stroke="black"/>')
    out.append(f'<line x1="{L}" y1="{T2}" x2="{L}" y2="{T2 + PH}" stroke="black"/>')
    for k in range(5):
        v = ymax2 * k / 4
        out.append(f'<text x="{L - 6}" y="{y2(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    pts = " ".join(f"{x(i + 1):.1f},{y2(v):.1f}" for i, v in enumerate(allow))
    out.append(f'<polyline points="{x(0):.1f},{y2(allowance(mode, limit, period, 0)):.1f} {pts}" fill="none" '
               f'stroke="#c0392b" stroke-width="2" stroke-dasharray="6,4"/>')
    pts = " ".join(f"{x(i + 1):.1f},{y2(v):.1f}" for i, v in enumerate(cum))
    out.append(f'<polyline points="{x(0):.1f},{y2(0):.1f} {pts}" fill="none" stroke="#1f4e9c" stroke-width="2"/>')
    out.append(f'<text x="{L}" y="{T2 - 6}">cumulative admitted tokens (blue) and the most the provider allows '
               f'({mode.replace("_", " ")}, red)</text>')
    for k in range(0, int(span) + 1, max(5, int(span // 10 // 5 * 5) or 5)):
        out.append(f'<text x="{x(k):.1f}" y="{T2 + PH + 16}" text-anchor="middle">{k}s</text>')
        out.append(f'<text x="{x(k):.1f}" y="{T + PH + 16}" text-anchor="middle">{k}s</text>')
    lx = L + 10
    for s in series:
        out.append(f'<rect x="{lx}" y="{H - 18}" width="10" height="10" fill="{s["color"]}" opacity="0.55"/>'
                   f'<text x="{lx + 14}" y="{H - 9}">{_esc(s["label"])}</text>')
        lx += 14 + 8 * len(s["label"]) + 20
    out.append("</svg>")
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    p = REPORT_DIR / f"{name}.svg"
    p.write_text("\n".join(out))
    return p


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
