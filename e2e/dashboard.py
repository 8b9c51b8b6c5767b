"""The shipped Grafana dashboard evaluated on a real Prometheus and drawn as SVG: every panel's
queries, with the dashboard's variables bound as Grafana binds them, run as range queries over
a run's scrapes; the answers laid out on the dashboard's own grid. Also a terminal frame (the
text `ext-authz top` prints) drawn as SVG. Used by test_dashboard.py."""

from __future__ import annotations

import html
import json
import math
import re
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "llm-ratelimit.json"

# Grafana's grid: 24 columns; a row unit is 30 px high.
COL, ROW_H = 50, 30
COLOURS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0",
           "#508642", "#cca300", "#447ebc", "#c15c17"]


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def bind(expr: str, rate_interval: str) -> str:
    """The expression as Grafana sends it: $job at its "All" value (the variable's allValue),
    $__rate_interval at rate_interval."""
    return expr.replace("$job", ".*").replace("$__rate_interval", rate_interval)


def query_range(prom: str, expr: str, start: float, end: float, step: float) -> list[dict]:
    q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{q}", timeout=30) as r:
        out = json.loads(r.read())
    if out.get("status") != "success":
        raise RuntimeError(f"{expr}: {out}")
    return out["data"]["result"]


def legend(fmt: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt or "").strip() or \
        ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "value"


def evaluate(prom: str, dash: dict, start: float, end: float, step: float, rate_interval: str) -> list[dict]:
    """Every panel with its series: [{"title", "gridPos", "unit", "type", "series": [{"name",
    "points": [(t, v)]}]}], rows included (type "row", no series)."""
    panels = []
    for p in dash["panels"]:
        out = {"title": p["title"], "gridPos": p["gridPos"], "type": p["type"],
               "unit": p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short"), "series": [],
               "calcs": p.get("options", {}).get("legend", {}).get("calcs", [])}
        for t in p.get("targets", []):
            for r in query_range(prom, bind(t["expr"], rate_interval), start, end, step):
                pts = [(float(ts), float(v)) for ts, v in r["values"] if not math.isnan(float(v)) and not math.isinf(float(v))]
                if pts:
                    out["series"].append({"name": legend(t.get("legendFormat", ""), r["metric"]), "points": pts})
        panels.append(out)
    return panels


def fmt(v: float, unit: str) -> str:
    if unit == "percentunit":
        return f"{v * 100:.0f}%"
    if unit == "s":
        if v == 0:
            return "0"
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"
    suffix = {"reqps": "/s", "ops": "/s"}.get(unit, "")
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.1f}M{suffix}"
    if a >= 1e3:
        return f"{v / 1e3:.1f}k{suffix}"
    if a >= 10 or v == int(v):
        return f"{v:.0f}{suffix}"
    return f"{v:.2f}{suffix}"


# Grafana's legend calculations this drawing knows, by their names in the dashboard JSON.
CALCS = {"mean": ("mean", lambda vs: sum(vs) / len(vs)), "max": ("max", max), "min": ("min", min),
         "lastNotNull": ("last", lambda vs: vs[-1]), "last": ("last", lambda vs: vs[-1])}


def _text(x: float, y: float, s: str, size: int = 11, fill: str = "#d8d9da", anchor: str = "start", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" '
            f'font-weight="{weight}">{html.escape(s)}</text>')


def svg(panels: list[dict], start: float, end: float, caption: str) -> str:
    """The panels on the dashboard's grid, in Grafana's dark colours."""
    width = 24 * COL
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) * ROW_H + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Helvetica, Arial, sans-serif">',
           f'<rect width="{width}" height="{height}" fill="#111217"/>']
    for p in panels:
        g = p["gridPos"]
        x0, y0, w, h = g["x"] * COL + 4, g["y"] * ROW_H + 4, g["w"] * COL - 8, g["h"] * ROW_H - 8
        if p["type"] == "row":
            out.append(_text(x0 + 4, y0 + 18, p["title"], size=14, weight="bold"))
            continue
        out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="#181b1f" stroke="#2c3235"/>')
        out.append(_text(x0 + 8, y0 + 16, p["title"], size=12, weight="bold"))
        series = p["series"]
        # Legend: up to four entries, below the plot.
        shown = series[:4]
        leg_h = 14 * len(shown) + (14 if len(series) > 4 else 0)
        px, py, pw, ph = x0 + 56, y0 + 26, w - 68, h - 48 - leg_h
        if not series:
            out.append(_text(x0 + w / 2, y0 + h / 2, "No data", size=13, fill="#8e8e8e", anchor="middle"))
            continue
        vals = [v for s in series for _, v in s["points"]]
        lo, hi = min(0.0, min(vals)), max(vals)
        if p["unit"] == "percentunit":
            lo, hi = min(lo, 0.0), max(hi, 1.0)
        if hi <= lo:
            hi = lo + 1
        for i in range(3):
            v = lo + (hi - lo) * i / 2
            y = py + ph - ph * i / 2
            out.append(f'<line x1="{px}" y1="{y:.1f}" x2="{px + pw}" y2="{y:.1f}" stroke="#2c3235"/>')
            out.append(_text(px - 4, y + 4, fmt(v, p["unit"]), size=9, fill="#8e8e8e", anchor="end"))
        span = max(end - start, 1)
        for i in range(4):
            t = start + span * i / 3
            out.append(_text(px + pw * i / 3, py + ph + 12, f"{(t - start):.0f}s", size=9, fill="#8e8e8e",
                             anchor="middle" if 0 < i < 3 else ("start" if i == 0 else "end")))
        for k, s in enumerate(series):
            c = COLOURS[k % len(COLOURS)]
            pts = " ".join(f"{px + pw * (t - start) / span:.1f},{py + ph - ph * (v - lo) / (hi - lo):.1f}" for t, v in s["points"])
            out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.5"/>')
        # The legend's figures are the panel's own legend calculations (mean, max, min), as Grafana's.
        calcs = [c for c in p.get("calcs", []) if c in CALCS] or ["lastNotNull"]
        for k, s in enumerate(shown):
            ly = py + ph + 26 + 14 * k
            out.append(f'<rect x="{px}" y="{ly - 8}" width="10" height="3" fill="{COLOURS[k % len(COLOURS)]}"/>')
            vs = [v for _, v in s["points"]]
            figures = "  ".join(f"{CALCS[c][0]} {fmt(CALCS[c][1](vs), p['unit'])}" for c in calcs)
            out.append(_text(px + 16, ly - 4, f"{s['name'][:70]}  {figures}", size=9, fill="#c7d0d9"))
        if len(series) > 4:
            out.append(_text(px + 16, py + ph + 26 + 14 * 4 - 4, f"and {len(series) - 4} more series", size=9, fill="#8e8e8e"))
    out.append(_text(8, height - 14, caption, size=11, fill="#8e8e8e"))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def terminal_svg(frame: str, caption: str) -> str:
    """A plain-text terminal frame drawn as SVG: monospace, light on dark, one line a row."""
    lines = frame.rstrip("\n").split("\n")
    cw, lh = 7.2, 16
    width = int(max(len(x) for x in lines) * cw + 32)
    height = len(lines) * lh + 52
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
           f'<rect width="{width}" height="{height}" rx="6" fill="#1e1e1e"/>']
    for i, line in enumerate(lines):
        colour = "#9cdcfe" if i < 2 else ("#dcdcaa" if i == 3 else "#d4d4d4")
        out.append(f'<text x="16" y="{24 + i * lh}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" '
                   f'font-size="12" fill="{colour}" xml:space="preserve">{html.escape(line)}</text>')
    out.append(f'<text x="16" y="{height - 12}" font-family="Helvetica, Arial, sans-serif" font-size="11" '
               f'fill="#8e8e8e">{html.escape(caption)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def titles(svg_text: str) -> list[str]:
    """The panel titles a drawn dashboard shows (bold texts), in order."""
    return [html.unescape(m) for m in re.findall(r'font-weight="bold">([^<]*)</text>', svg_text)]
