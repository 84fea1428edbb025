"""Draw the Grafana dashboard `gpuaudit monitoring dashboard` writes, from its
own queries, where no Grafana server can run: each panel's PromQL is run
against a real Prometheus (range queries for time series, instant ones for
tables), drawn as SVG/HTML in the dashboard's 24-column grid, and
photographed by headless Chromium.

With no --prometheus, it starts one holding the small synthetic set of
tests/test_monitoring.py (three pods on an H100 node, one pending pod), with
both levels of `gpuaudit monitoring rules` backfilled by promtool.

    python scripts/render_dashboard.py docs/img/monitoring-dashboard.png
"""

from __future__ import annotations

import argparse
import html
import json
import math
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuaudit.report.monitoring_dashboard import dashboard  # noqa: E402

WIDTH = 1600
UNIT_H = 28  # pixels per grid row
COLOURS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0"]


def _query(url: str, path: str, form: dict[str, str]) -> list[dict]:
    data = urllib.parse.urlencode(form).encode()
    with urllib.request.urlopen(f"{url}{path}", data=data, timeout=120) as resp:
        return json.loads(resp.read())["data"]["result"]


def _expr(text: str) -> str:
    return text.replace("$cluster", ".*").replace("$namespace", ".*").replace("$gpu_model", ".*")


def _legend(fmt: str, labels: dict[str, str]) -> str:
    out = fmt or ", ".join(f"{k}={v}" for k, v in labels.items())
    for key, value in labels.items():
        out = out.replace(f"{{{{{key}}}}}", value)
    return out or "value"


def _timeseries(panel: dict, url: str, start: float, end: float, w: int, h: int) -> str:
    step = max(60, int((end - start) / 120))
    series = []
    for target in panel["targets"]:
        for item in _query(
            url,
            "/api/v1/query_range",
            {"query": _expr(target["expr"]), "start": str(start), "end": str(end), "step": str(step)},
        ):
            points = [(float(t), float(v)) for t, v in item["values"] if math.isfinite(float(v))]
            series.append((_legend(target.get("legendFormat", ""), item["metric"]), points))
    top = max((v for _, pts in series for _, v in pts), default=1.0) or 1.0
    plot_h, plot_w, left = h - 60, w - 70, 55
    parts = [f'<svg width="{w}" height="{h - 28}">']
    for i in range(5):
        y = 8 + plot_h * i / 4
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.0f}" y2="{y:.0f}" stroke="#333"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.0f}" fill="#aaa" font-size="11" text-anchor="end">'
            f"{top * (4 - i) / 4:.3g}</text>"
        )
    for n, (_, points) in enumerate(series):
        coords = " ".join(
            f"{left + plot_w * (t - start) / (end - start):.1f},{8 + plot_h * (1 - v / top):.1f}" for t, v in points
        )
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{COLOURS[n % len(COLOURS)]}" stroke-width="2"/>')
    legend_y = plot_h + 24
    x = left
    for n, (name, _) in enumerate(series[:8]):
        parts.append(
            f'<rect x="{x}" y="{legend_y - 9}" width="10" height="10" fill="{COLOURS[n % len(COLOURS)]}"/>'
            f'<text x="{x + 14}" y="{legend_y}" fill="#ccc" font-size="11">{html.escape(name)}</text>'
        )
        x += 20 + 7 * len(name)
    parts.append("</svg>")
    return "".join(parts)


def _table(panel: dict, url: str, at: float) -> str:
    rows = []
    for target in panel["targets"]:
        for item in _query(url, "/api/v1/query", {"query": _expr(target["expr"]), "time": str(at)}):
            rows.append((item["metric"], float(item["value"][1])))
    keys = sorted({k for labels, _ in rows for k in labels})
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys) + "<th>GPUs</th>"
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(labels.get(k, ''))}</td>" for k in keys) + f"<td>{value:g}</td></tr>"
        for labels, value in rows[:12]
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render(model: dict, url: str, start: float, end: float, out: Path) -> None:
    col = WIDTH / 24
    blocks = []
    bottom = 0
    for panel in model["panels"]:
        pos = panel["gridPos"]
        x, y, w, h = pos["x"] * col, pos["y"] * UNIT_H, pos["w"] * col - 6, pos["h"] * UNIT_H - 6
        bottom = max(bottom, y + h + 10)
        title = html.escape(panel["title"])
        if panel["type"] == "row":
            blocks.append(f'<div class="row" style="left:{x}px;top:{y}px;width:{w}px">{title}</div>')
            continue
        inner = (
            _table(panel, url, end) if panel["type"] == "table" else _timeseries(panel, url, start, end, int(w), int(h))
        )
        blocks.append(
            f'<div class="panel" style="left:{x}px;top:{y}px;width:{w}px;height:{h}px">'
            f'<div class="title">{title}</div>{inner}</div>'
        )
    out = out.resolve()
    page = out.with_suffix(".html")
    page.write_text(
        "<html><head><style>body{margin:0;background:#111217;font-family:sans-serif;color:#ccc}"
        ".panel,.row{position:absolute;box-sizing:border-box}.panel{background:#181b1f;border:1px solid #2c2f33;"
        "border-radius:3px;overflow:hidden}.title{font-size:13px;padding:5px 8px;color:#ddd}"
        ".row{font-size:16px;font-weight:bold;padding:4px 0;color:#fff}"
        "table{font-size:11px;border-collapse:collapse;margin:4px 8px}td,th{padding:2px 8px;text-align:left;"
        "border-bottom:1px solid #2c2f33}</style></head><body>" + "".join(blocks) + "</body></html>",
        encoding="utf-8",
    )
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={out}",
            f"--window-size={WIDTH},{int(bottom)}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    page.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--prometheus", help="a Prometheus with the rules' series (default: start one)")
    parser.add_argument("--hours", type=float, default=3)
    args = parser.parse_args()
    model = dashboard(window="2h")
    if args.prometheus:
        end = time.time()
        render(model, args.prometheus, end - args.hours * 3600, end, args.out)
        return
    from tests.monitoring_prometheus import (
        RecordedPrometheus,
        activity_cluster,
        activity_families,
        ksm_families,
        level_files,
    )

    end = math.floor(time.time() / 60) * 60 - 3600
    times = [end - (180 - i) * 60 for i in range(181)]
    with tempfile.TemporaryDirectory(prefix="gpuaudit-dashboard-") as tmp:
        work = Path(tmp)
        server = RecordedPrometheus(work).load([*activity_families(end), *ksm_families(activity_cluster(), times)])
        try:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpuaudit",
                    "monitoring",
                    "rules",
                    "--out",
                    str(work / "rules"),
                    "--window",
                    "2h",
                    "--interval",
                    "1m",
                    "--class-interval",
                    "1m",
                ],
                check=True,
                capture_output=True,
            )
            gpu_level, availability_level = level_files(work / "rules" / "gpuaudit-rules.yaml", work)
            server.record(gpu_level, end - 3 * 3600, end, 60)
            server.record(availability_level, end - 3600, end, 60)
            render(model, server.url, end - 3600, end, args.out)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
