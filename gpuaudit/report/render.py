"""Render the report dict to report.html, report.md and report.json.

HTML: Jinja2 with autoescaping on, inline CSS and SVG, no script and a
Content-Security-Policy that allows none, no external URL. Markdown: every
string in the dict is escaped for Markdown (``|``, ``<``, backticks...)
before the template sees it, so cluster-supplied text cannot break a table
or inject HTML. All three come from the same dict: the same numbers. Its
text quotes the cluster (its name from the kubeconfig, pods, messages), so
each render first removes terminal controls and bidi overrides from every
string (gpuaudit/safetext.py); the format's own escaping follows, once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from gpuaudit.files import UnsafePathError, check_folder, inside, write_atomic
from gpuaudit.jsontext import indented
from gpuaudit.report import charts
from gpuaudit.safetext import clean_tree

FILES = ("report.html", "report.md", "report.json")
_MD_SPECIAL = str.maketrans(
    {
        "\\": "\\\\",
        "|": "\\|",
        "`": "\\`",
        "*": "\\*",
        "_": "\\_",
        "[": "\\[",
        "]": "\\]",
        "<": "&lt;",
        ">": "&gt;",
        "\n": " ",
        "\r": " ",
    }
)


# --- number formatting (shared by both templates) -------------------------------------


def num(value: Any, digits: int = 1) -> str:
    """1234 -> '1,234'; 12.25 -> '12.2' (``digits``); None -> '–'."""
    if value is None or isinstance(value, bool):
        return "–"
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def gpus(value: Any) -> str:
    """2 -> '2 GPUs', 1 -> '1 GPU', 2.5 -> '2.5 GPUs'."""
    return f"{num(value)} GPU" + ("" if value == 1 else "s")


def pct(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "–"
    return f"{value * 100:.0f}%"


def money(value: Any, currency: str = "") -> str:
    if not isinstance(value, (int, float)):
        return "–"
    text = f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:,.2f}"
    return f"{text} {currency}".strip()


def rate(value: Any) -> str:
    """Bytes per second, in decimal units."""
    if not isinstance(value, (int, float)):
        return "–"
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B/s"


_CODE = re.compile(r"`([^`]+)`")


def code_spans(value: Any) -> markupsafe.Markup:
    """Escape ``value`` for HTML, then show `backticked` parts as code. The
    escaping comes first, so nothing in the text can become markup."""
    escaped = str(markupsafe.escape(value))
    return markupsafe.Markup(_CODE.sub(r"<code>\1</code>", escaped))


def md_escape(value: Any) -> Any:
    """Escape every string in ``value`` (recursively) for Markdown text."""
    if isinstance(value, str):
        return value.translate(_MD_SPECIAL)
    if isinstance(value, Mapping):
        return {k: md_escape(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [md_escape(v) for v in value]
    return value


@cache
def _environment(autoescape: bool) -> jinja2.Environment:
    folder = resources.files("gpuaudit") / "report" / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(num=num, gpus=gpus, pct=pct, money=money, rate=rate, code=code_spans)
    return env


def _charts(report: Mapping[str, Any]) -> dict[str, Any]:
    first = report["first_screen"]
    return {
        "overview": charts.stacked_bar(first["gpus"]),
        # pools the cluster has (pending demand for others is in the table)
        "pools": charts.group_bars([p for p in report["availability"]["by_pool"] if p["nodes"]]),
        "teams": charts.group_bars(report["availability"]["by_team"][:TABLE_ROWS]),
        "whatif": charts.range_bars(
            report["whatif"]["scenarios"], float(report["scheduler"]["hardware_demand"]["gpus"] or 0.0)
        ),
        "trend": charts.line_chart(
            report["trend"],
            [
                ("allocated", "Allocated"),
                ("active", "Actively computing"),
                ("resident_idle", "Idle, model resident"),
                ("free", "Free"),
            ],
        ),
        "segments": charts.SEGMENTS,
    }


# Rows a table shows in the page and in print, whatever the cluster's size:
# the rest is in report.json (the page says how many). A fleet of hundreds
# of teams or thousands of workloads still prints to a few pages.
TABLE_ROWS = 12


def render_html(report: Mapping[str, Any]) -> str:
    template = _environment(True).get_template("report.html.j2")
    shown = clean_tree(report)
    return template.render(r=shown, charts=_charts(shown), top_rows=TABLE_ROWS)


def render_markdown(report: Mapping[str, Any]) -> str:
    template = _environment(False).get_template("report.md.j2")
    return template.render(r=md_escape(clean_tree(report)), top_rows=TABLE_ROWS)


def render_json(report: Mapping[str, Any]) -> str:
    return indented(clean_tree(report), ensure_ascii=False, allow_nan=False) + "\n"


def report_paths(out: Path) -> dict[str, Path]:
    """Where write_report writes each file, checked before anything is
    written: inside ``out`` (UnsafePathError for a symlink planted there that
    points out), a file and not a folder, in a folder that can exist
    (WriteError when ``out``, or a part of it, is a file)."""
    check_folder(out)
    paths = {name: inside(out, name) for name in FILES}
    for name, path in paths.items():
        if path.is_dir():
            raise UnsafePathError(f"{Path(out) / name} is a folder: the report cannot be written there")
    return paths


def write_report(report: Mapping[str, Any], out: Path) -> list[Path]:
    """Write the three files into ``out`` (created when missing), each atomically."""
    return _write(out, render_html(report), render_markdown(report), render_json(report))


def _write(out: Path, html: str, markdown: str, json_text: str) -> list[Path]:
    paths = report_paths(out)
    rendered = {"report.html": html, "report.md": markdown, "report.json": json_text}
    for name, text in rendered.items():
        write_atomic(paths[name], text)
    return [paths[name] for name in rendered]


# --- the fleet ------------------------------------------------------------------------


def render_fleet_html(report: Mapping[str, Any]) -> str:
    return _environment(True).get_template("fleet.html.j2").render(r=clean_tree(report))


def render_fleet_markdown(report: Mapping[str, Any]) -> str:
    return _environment(False).get_template("fleet.md.j2").render(r=md_escape(clean_tree(report)))


def write_fleet(report: Mapping[str, Any], out: Path) -> list[Path]:
    """Write the fleet review's three files into ``out``, each atomically."""
    return _write(out, render_fleet_html(report), render_fleet_markdown(report), render_json(report))
